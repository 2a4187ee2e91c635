#pragma once
// The helpers of the op table kernels/ops.inc, whose entries carry their parameter and argument lists in parentheses:
//   HPCT_UNPAREN list      the list without its parentheses: HPCT_UNPAREN (int a, int b) -> int a, int b
//   HPCT_WITH_CTX list     the list after the context: HPCT_WITH_CTX (int a) -> const ExecContext& ctx, int a
//   HPCT_CTX_ARGS list     the arguments after the context: HPCT_CTX_ARGS (a) -> ctx, a
// (an empty list gives the context alone).
#define HPCT_UNPAREN(...) __VA_ARGS__
#define HPCT_WITH_CTX(...) const ExecContext& ctx __VA_OPT__(, ) __VA_ARGS__
#define HPCT_CTX_ARGS(...) ctx __VA_OPT__(, ) __VA_ARGS__
