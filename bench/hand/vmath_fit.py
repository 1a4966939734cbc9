#!/usr/bin/env python3
"""The fits behind the C prelude's erf and tanh (kg_erff, kg_tanhf, codegen/c.c): least squares on Chebyshev
nodes, in double, then rounded to float.

  erf(x)  = x + x a(x^2)        for |x| <= 1, a of degree 6
  erf(x)  = 1 - c(|x| - 2.25)   for 1 < |x| <= 4 (|x| clamped to 4), c of degree 14 fitted to erfc
  tanh(x) = x + x s q(s), s = x^2, for |x| <= 0.75, q of degree 5 (beyond, 1 - 2 / (exp(2 |x|) + 1): no fit)

Prints the coefficients as C literals (highest degree first, Horner's order) and the largest error, in ulps of
the float result, of each piece evaluated as the prelude does (float32, one rounding per fused multiply-add) on
2M points against math.erf and numpy's tanh. Needs numpy: build/venv-torch/bin/python bench/hand/vmath_fit.py
"""
import math

import numpy as np
from numpy.polynomial import chebyshev as cheb
from numpy.polynomial import polynomial as poly

f32 = np.float32
A_END, B_END, B_MID, T_END = 1.0, 4.0, 2.25, 0.75


def fma(a, b, c):
    # a float product is exact in double; the sum rounds once to double, then to float (the double rounding
    # is far below what the fit is measured at)
    return f32(np.float64(a) * np.float64(b) + np.float64(c))


def horner(coefs, x):
    r = np.full_like(x, coefs[0], dtype=f32)
    for c in coefs[1:]:
        r = fma(r, x, f32(c))
    return r


def nodes(lo, hi, n):
    return np.cos(np.linspace(0, np.pi, n)) * 0.5 * (hi - lo) + 0.5 * (lo + hi)


def fit_a():
    x = nodes(0.0, A_END, 6000)
    x = x[x > 1e-4]
    c = poly.polyfit(x * x, np.vectorize(math.erf)(x) / x - 1, 6)
    return [f32(v) for v in c[::-1]]


def fit_b():
    t = nodes(A_END, B_END, 8000)
    c = cheb.Chebyshev.fit(t - B_MID, np.vectorize(math.erfc)(t), 14).convert(kind=poly.Polynomial).coef
    return [f32(v) for v in c[::-1]]


def fit_t():
    x = nodes(0.0, T_END, 6000)
    x = x[x > 1e-3]
    s = x * x
    c = poly.polyfit(s, (np.tanh(x) / x - 1) / s, 5)
    return [f32(v) for v in c[::-1]]


def eval_t(cs, x):
    s = f32(x * x)
    return fma(f32(horner(cs, s) * s), x, x)


def eval_a(cs, x):
    return fma(horner(cs, f32(x * x)), x, x)


def eval_b(cs, t):
    return f32(f32(1) - horner(cs, f32(t - f32(B_MID))))


def worst_ulps(x, y, fn=np.vectorize(math.erf)):
    want = fn(x.astype(np.float64))
    w = np.abs(want.astype(f32))
    ulp = (np.nextafter(w, f32(np.inf)) - w).astype(np.float64)
    err = np.abs(y.astype(np.float64) - want) / ulp
    i = int(np.argmax(err))
    return err[i], x[i]


def literal(v):
    return str(f32(v)) + "f"


def main():
    a, b = fit_a(), fit_b()
    print("erf a:", ", ".join(literal(v) for v in a))
    print("erf c:", ", ".join(literal(v) for v in b))
    xa = np.linspace(1e-6, A_END, 2000001).astype(f32)
    xb = np.linspace(A_END, B_END, 2000001).astype(f32)
    print("erf, |x| <= 1: at most %.2f ulp (at %.6g)" % worst_ulps(xa, eval_a(a, xa)))
    print("erf, 1 < |x| <= 4: at most %.2f ulp (at %.6g)" % worst_ulps(xb, eval_b(b, xb)))
    q = fit_t()
    print("tanh q:", ", ".join(literal(v) for v in q))
    xt = np.linspace(1e-6, T_END, 2000001).astype(f32)
    print("tanh, |x| <= 0.75: at most %.2f ulp (at %.6g)" % worst_ulps(xt, eval_t(q, xt), np.tanh))


if __name__ == "__main__":
    main()
