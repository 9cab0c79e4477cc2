"""fp4forge TEST-ONLY vLLM plugin: lets vLLM's CPU build run compressed-tensors NVFP4A16
(`nvfp4-pack-quantized`, weight-only) checkpoints, so that vLLM's own loader can be the oracle
for fp4forge's output in CI. Never use it to serve anything.

It replaces only the last step, the matrix multiply, and only where vLLM refuses:
- dense (CompressedTensorsW4A4Fp4 with use_a16): vLLM's `init_nvfp4_linear_kernel` raises
  "Forced NVFP4 kernel MarlinNvFp4LinearKernel is not supported: Marlin FP4 not available" on
  CPU. We answer with a kernel whose process_weights_after_loading takes the layer exactly as
  vLLM's scheme left it (weight_packed renamed to weight, the q/k/v or gate/up global scales
  folded by vLLM into one 1/max multiplier), dequantizes it with vLLM's own
  `dequantize_to_dtype`, and hands the bf16 weight to vLLM's `UnquantizedLinearMethod` (the
  very CPU GEMM a bf16 checkpoint gets).
- MoE (CompressedTensorsW4A4Nvfp4MoEMethod with use_a16): `select_nvfp4_moe_backend` raises
  "No NvFp4 MoE backend supports the deployment configuration." on CPU. We answer with a
  marker backend; vLLM's own process_weights_after_loading then runs (renames, the w1/w3
  global-scale check, the [:, 0] and 1/x folding), the marker makes its kernel-format step a
  no-op, and the "kernel" it builds dequantizes w13/w2 with `dequantize_to_dtype` and hands
  them to vLLM's `UnquantizedFusedMoEMethod` (the CPU fused-MoE path of a bf16 checkpoint),
  which then replaces the layer's quant method.
- FP8 weight-only (CompressedTensorsW8A16Fp8: a `naive-quantized` group with 8-bit float
  weights and no input activations, as `fp4forge quantize --fp8` writes): vLLM's
  `init_wfp8_a16_linear_kernel` raises "Failed to find a kernel that can implement the
  ScaledMM linear layer" on CPU (its CPU kernel list is empty). We answer with a kernel whose
  process_weights_after_loading takes the layer as vLLM's scheme left it (weight fp8,
  transposed to (K, N); weight_scale float32 per output channel), multiplies back in float32
  and rounds once to the model dtype (compressed-tensors' dequantization gives the same
  bits: an e4m3 times a bf16 scale is exact in float32), and hands that to vLLM's
  `UnquantizedLinearMethod`.
Config parsing, ignore mapping, scheme choice, create_weights, name mappers, expert mapping,
weight loaders and global-scale folding all stay vLLM's: this module calls vLLM, it copies
none of it.

FP4FORGE_VLLM_CPU_NVFP4 (read at each layer construction, so one process can also record
the unpatched refusal): unset or 1 = every fallback, 0 = none, dense / moe / fp8 = only that one.
Layers it handled carry `fp4forge_test_dequantized` ("nvfp4-linear" / "nvfp4-moe" /
"fp8-linear")."""
import os

_PATCHED = False
_SAID = set()


def _say_once(logger, key, msg, *args):
    if key not in _SAID:
        _SAID.add(key)
        logger.warning(msg, *args)


def enabled(kind: str) -> bool:
    v = os.environ.get("FP4FORGE_VLLM_CPU_NVFP4", "1")
    return v == "1" or v == kind


def register() -> None:
    """vllm.general_plugins entry point; safe to call many times, in every process."""
    global _PATCHED
    if _PATCHED:
        return
    _PATCHED = True
    _patch_dense()
    _patch_moe()
    _patch_fp8()


def _patch_dense() -> None:
    import torch

    from vllm.logger import init_logger
    from vllm.model_executor.kernels.linear.nvfp4.base import (
        NvFp4LinearKernel,
        NvFp4LinearLayerConfig,
    )
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.model_executor.layers.quantization.compressed_tensors.schemes import (
        compressed_tensors_w4a4_nvfp4 as scheme_mod,
    )
    from vllm.model_executor.layers.quantization.utils.nvfp4_emulation_utils import (
        dequantize_to_dtype,
    )
    from vllm.model_executor.utils import replace_parameter
    from vllm.platforms import current_platform

    logger = init_logger("vllm.plugins.fp4forge_cpu_nvfp4")
    vllm_init = scheme_mod.init_nvfp4_linear_kernel

    class Fp4forgeTestCpuDequantNvFp4Kernel(NvFp4LinearKernel):
        """NVFP4 weight-only on CPU: dequantize once with vLLM's dequantize_to_dtype, then
        vLLM's bf16 linear. TEST ONLY."""

        def __init__(self, config: NvFp4LinearLayerConfig) -> None:
            super().__init__(config)
            # built here, inside vLLM's config context, as a bf16 layer's method is
            self.bf16 = UnquantizedLinearMethod()

        @classmethod
        def is_supported(cls, compute_capability=None):
            if current_platform.is_cpu():
                return True, None
            return False, "fp4forge test plugin: CPU only"

        @classmethod
        def can_implement(cls, config):
            return True, None

        def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
            dtype = getattr(layer, "params_dtype", None) or torch.get_default_dtype()
            w = dequantize_to_dtype(
                layer.weight.data,  # vLLM's scheme renamed weight_packed -> weight
                layer.weight_scale.data,
                layer.weight_global_scale.data,  # vLLM's folding: 1 / max(divisors)
                dtype,
                block_size=16,
                swizzle=False,
            )
            replace_parameter(layer, "weight", w)
            self.bf16.process_weights_after_loading(layer)
            layer.fp4forge_test_dequantized = "nvfp4-linear"  # for the test to count

        def apply_weights(self, layer, x, bias=None):
            return self.bf16.apply(layer, x, bias)

    def init_nvfp4_linear_kernel(use_a16: bool = False):
        try:
            return vllm_init(use_a16=use_a16)
        except ValueError as e:
            if not (enabled("dense") and use_a16 and current_platform.is_cpu()):
                raise
            _say_once(logger, "dense",
                      "fp4forge TEST plugin: vLLM refused NVFP4A16 linear on CPU (%s); "
                      "using dequantize_to_dtype + vLLM's bf16 linear instead", e)
            return Fp4forgeTestCpuDequantNvFp4Kernel(NvFp4LinearLayerConfig())

    scheme_mod.init_nvfp4_linear_kernel = init_nvfp4_linear_kernel


def _patch_moe() -> None:
    import torch

    from vllm.logger import init_logger
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import (
        UnquantizedFusedMoEMethod,
    )
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import (  # noqa: E501
        compressed_tensors_moe_w4a4_nvfp4 as moe_mod,
    )
    from vllm.model_executor.layers.quantization.utils.nvfp4_emulation_utils import (
        dequantize_to_dtype,
    )
    from vllm.model_executor.utils import replace_parameter
    from vllm.platforms import current_platform

    logger = init_logger("vllm.plugins.fp4forge_cpu_nvfp4")
    vllm_select = moe_mod.select_nvfp4_moe_backend
    vllm_convert = moe_mod.convert_to_nvfp4_moe_kernel_format
    vllm_quant_config = moe_mod.make_nvfp4_moe_quant_config
    vllm_make_kernel = moe_mod.make_nvfp4_moe_kernel

    class CpuBf16Backend:
        """Stands where an NvFp4MoeBackend would; carries the unquantized method that will
        run the layer (built here, inside vLLM's config context)."""

        value = "FP4FORGE_TEST_CPU_DEQUANT_BF16"

        def __init__(self, moe_config):
            self.bf16 = UnquantizedFusedMoEMethod(moe_config)

        def __repr__(self):
            return self.value

    class DequantizeThenUnquantized:
        """Stands where vLLM's NVFP4 FusedMoEKernel would. vLLM's method calls
        `kernel.fused_experts.process_weights_after_loading(layer)` last; that is where the
        layer, loaded and folded by vLLM, is dequantized and handed to the bf16 method."""

        def __init__(self, backend: CpuBf16Backend):
            self.backend = backend
            self.fused_experts = self

        def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
            dtype = getattr(layer, "params_dtype", None) or torch.get_default_dtype()
            for w, s, g in (("w13_weight", "w13_weight_scale", "w13_weight_scale_2"),
                            ("w2_weight", "w2_weight_scale", "w2_weight_scale_2")):
                deq = dequantize_to_dtype(
                    getattr(layer, w).data,  # [E, N, K/2] uint8
                    getattr(layer, s).data,  # [E, N, K/16] fp8
                    getattr(layer, g).data,  # [E] = 1 / divisor (vLLM's folding)
                    dtype,
                    block_size=16,
                    swizzle=False,
                )
                replace_parameter(layer, w, deq)
            bf16 = self.backend.bf16
            bf16.process_weights_after_loading(layer)
            layer._replace_quant_method(bf16)
            layer.fp4forge_test_dequantized = "nvfp4-moe"  # for the test to count

    def select_nvfp4_moe_backend(config, weight_key, activation_key):
        try:
            return vllm_select(config=config, weight_key=weight_key,
                               activation_key=activation_key)
        except (NotImplementedError, ValueError) as e:
            if not (enabled("moe") and activation_key is None and current_platform.is_cpu()):
                raise
            _say_once(logger, "moe",
                      "fp4forge TEST plugin: vLLM refused NVFP4A16 MoE on CPU (%s); "
                      "using dequantize_to_dtype + vLLM's unquantized fused MoE instead", e)
            b = CpuBf16Backend(config)
            return b, b.bf16.experts_cls

    def _backend(args, kwargs, name):
        return kwargs[name] if name in kwargs else (args[0] if args else None)

    def convert_to_nvfp4_moe_kernel_format(*args, **kwargs):
        if not isinstance(_backend(args, kwargs, "nvfp4_backend"), CpuBf16Backend):
            return vllm_convert(*args, **kwargs)
        # vLLM's folded tensors, unchanged: the dequantization reads them as they are
        return tuple(kwargs[k] for k in ("w13", "w13_scale", "w13_scale_2", "a13_scale",
                                         "w2", "w2_scale", "w2_scale_2", "a2_scale"))

    def make_nvfp4_moe_quant_config(*args, **kwargs):
        b = _backend(args, kwargs, "backend")
        if not isinstance(b, CpuBf16Backend):
            return vllm_quant_config(*args, **kwargs)
        return b.bf16.get_fused_moe_quant_config(kwargs["layer"])

    def make_nvfp4_moe_kernel(*args, **kwargs):
        b = kwargs.get("backend")
        if not isinstance(b, CpuBf16Backend):
            return vllm_make_kernel(*args, **kwargs)
        return DequantizeThenUnquantized(b)

    moe_mod.select_nvfp4_moe_backend = select_nvfp4_moe_backend
    moe_mod.convert_to_nvfp4_moe_kernel_format = convert_to_nvfp4_moe_kernel_format
    moe_mod.make_nvfp4_moe_quant_config = make_nvfp4_moe_quant_config
    moe_mod.make_nvfp4_moe_kernel = make_nvfp4_moe_kernel


def _patch_fp8() -> None:
    import torch

    from vllm.logger import init_logger
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.model_executor.layers.quantization.compressed_tensors.schemes import (
        compressed_tensors_w8a16_fp8 as scheme_mod,
    )
    from vllm.model_executor.utils import replace_parameter
    from vllm.platforms import current_platform

    logger = init_logger("vllm.plugins.fp4forge_cpu_nvfp4")
    vllm_init = scheme_mod.init_wfp8_a16_linear_kernel

    class Fp4forgeTestCpuDequantFp8Kernel:
        """FP8 weight-only on CPU: dequantize once, then vLLM's bf16 linear. TEST ONLY.
        Stands where vLLM's FP8ScaledMMLinearKernel would: the scheme reads `config`, calls
        process_weights_after_loading and apply_weights."""

        def __init__(self, config) -> None:
            self.config = config
            self.bf16 = UnquantizedLinearMethod()

        def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
            dtype = getattr(layer, "orig_dtype", None) or torch.get_default_dtype()
            # the scheme transposed weight to (K, N); weight_scale is [N, 1] (channel)
            w = layer.weight.data.t().float() * layer.weight_scale.data.float().reshape(-1, 1)
            replace_parameter(layer, "weight", w.to(dtype).contiguous())
            self.bf16.process_weights_after_loading(layer)
            layer.fp4forge_test_dequantized = "fp8-linear"  # for the test to count

        def apply_weights(self, layer, x, bias=None):
            return self.bf16.apply(layer, x, bias)

    def init_wfp8_a16_linear_kernel(*args, **kwargs):
        try:
            return vllm_init(*args, **kwargs)
        except ValueError as e:
            if not (enabled("fp8") and current_platform.is_cpu()):
                raise
            _say_once(logger, "fp8",
                      "fp4forge TEST plugin: vLLM refused FP8 weight-only linear on CPU (%s); "
                      "dequantizing to the model dtype + vLLM's bf16 linear instead",
                      str(e).splitlines()[0])
            from vllm.model_executor.kernels.linear.scaled_mm import FP8ScaledMMLinearLayerConfig
            names = ("weight_quant_key", "activation_quant_key", "weight_shape", "input_dtype", "out_dtype")
            return Fp4forgeTestCpuDequantFp8Kernel(FP8ScaledMMLinearLayerConfig(**{k: kwargs[k] for k in names}))

    scheme_mod.init_wfp8_a16_linear_kernel = init_wfp8_a16_linear_kernel
