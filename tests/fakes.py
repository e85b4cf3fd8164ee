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
