/* What one candidate costs rank 0 beyond the search, for bench/mpi-scaling.sh's model: the round trip of a
 * candidate-sized message (a trace, ~1 KB) and a result-sized answer (~0.4 KB) between rank 0 and rank 1, the way
 * dist/ sends them (Isend, Iprobe, Recv), and one appended record fsynced to a file in DIR (rank 0 fsyncs each
 * result it logs). Prints "rtt_us N" and "fsync_us N".
 *
 * usage: mpirun -np 2 mpi_pingpong DIR [ROUNDS]
 * Built by the Makefile with MPI's flags (KG_HAVE_MPI); without MPI it only says so. */
#include <stdio.h>
#ifndef KG_HAVE_MPI
int main(void) {
  fprintf(stderr, "mpi_pingpong: built without MPI (make deps installs it; then make)\n");
  return 2;
}
#else
#include <fcntl.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int rounds = argc > 2 ? atoi(argv[2]) : 2000;
  if (size < 2 || argc < 2 || rounds < 1) {
    if (rank == 0) fprintf(stderr, "usage: mpirun -np 2 mpi_pingpong DIR [ROUNDS]\n");
    MPI_Finalize();
    return 2;
  }
  char job[1024], res[400];
  memset(job, 'j', sizeof job);
  memset(res, 'r', sizeof res);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    double t0 = now();
    for (int i = 0; i < rounds; i++) {
      MPI_Request rq;
      MPI_Isend(job, sizeof job, MPI_BYTE, 1, 1, MPI_COMM_WORLD, &rq);
      int flag = 0;
      MPI_Status st;
      while (!flag) MPI_Iprobe(MPI_ANY_SOURCE, 2, MPI_COMM_WORLD, &flag, &st);
      MPI_Recv(res, sizeof res, MPI_BYTE, st.MPI_SOURCE, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Wait(&rq, MPI_STATUS_IGNORE);
    }
    double rtt = (now() - t0) / rounds;
    char path[4096];
    snprintf(path, sizeof path, "%s/pingpong-fsync.bin", argv[1]);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_TRUNC, 0644);
    int n = rounds < 200 ? rounds : 200;
    double fs = -1;
    if (fd >= 0) {
      double t1 = now();
      for (int i = 0; i < n; i++)
        if (write(fd, res, sizeof res) != (ssize_t)sizeof res || fsync(fd) != 0) break;
      fs = (now() - t1) / n;
      close(fd);
      unlink(path);
    }
    printf("rtt_us %.2f\nfsync_us %.2f\n", rtt * 1e6, fs * 1e6);
  } else if (rank == 1) {
    for (int i = 0; i < rounds; i++) {
      MPI_Recv(job, sizeof job, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(res, sizeof res, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
    }
  }
  MPI_Finalize();
  return 0;
}
#endif
