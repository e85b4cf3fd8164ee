"""Fake environments for resolver tests: the machines users run on."""

from launcher.plan.environment import Environment, Gpu

CPU_AMX = Environment(cpu_count=32, cpu_flags=frozenset({"avx512f", "amx_tile", "amx_bf16", "avx512_bf16"}))
CPU_AVX512_BF16 = Environment(cpu_count=2, cpu_flags=frozenset({"avx512f", "avx512_bf16"}))
CPU_PLAIN = Environment(cpu_count=8, cpu_flags=frozenset({"avx2", "fma"}))
V100 = Gpu("Tesla V100", (7, 0))
A100 = Gpu("A100-SXM4", (8, 0))
ONE_V100 = Environment(cpu_count=8, gpus=(V100,))
ONE_A100 = Environment(cpu_count=8, gpus=(A100,))
TWO_A100 = Environment(cpu_count=16, gpus=(A100, A100))
EIGHT_A100 = Environment(cpu_count=96, gpus=(A100,) * 8)
EIGHT_V100 = Environment(cpu_count=64, gpus=(V100,) * 8)
OLD_GPU = Environment(cpu_count=8, gpus=(Gpu("Tesla P100", (6, 0)),))
TWO_WORKERS = Environment(
    cpu_count=2,
    tf_config={"cluster": {"worker": ["127.0.0.1:20001", "127.0.0.1:20002"]}, "task": {"type": "worker", "index": 0}},
)

# Measured matmul rates (GFLOP/s, 2048^3) of the CPUs this project has run on.
AMX_RATES = {"float32_graph": 300.0, "float32_xla": 290.0, "bfloat16_graph": 1250.0, "bfloat16_xla": 250.0}
EPYC_RATES = {
    "float32_graph": 211.0,
    "float32_xla": 193.0,
    "bfloat16_graph": 401.0,
    "bfloat16_xla": 194.0,
    "float16_graph": 196.0,
    "float16_xla": 188.0,
}
XEON_RATES = {"float32_graph": 295.0, "float32_xla": 295.0, "bfloat16_graph": 162.0, "bfloat16_xla": 270.0}
CPU_AMX_MEASURED = Environment(cpu_count=32, cpu_flags=CPU_AMX.cpu_flags, matmul_gflops=AMX_RATES)
EPYC_AVX512_BF16 = Environment(cpu_count=2, cpu_flags=CPU_AVX512_BF16.cpu_flags, matmul_gflops=EPYC_RATES)
XEON_AVX512_BF16 = Environment(cpu_count=2, cpu_flags=CPU_AVX512_BF16.cpu_flags, matmul_gflops=XEON_RATES)
