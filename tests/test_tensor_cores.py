"""The one tensor-core / matrix-core kernel list (SPEC §2.3), on real kernel names of each
GPU generation, and the "matrix cores" labels of ROCm traces."""

from __future__ import annotations

import re

import pytest
from tracebuild import NO_SHARED, build, have_shared, kernel, shared_views, step

from stepscope.taxonomy import TENSOR_CORE_KERNEL
from stepscope.views import build_views

#: Kernel names as real traces print them (long Tensile/CK names cut after their tile
#: fields); the trace or listing each comes from is named.
TENSOR_CORE_NAMES = [
    # V100 / A100 (hta_a100_alexnet_nosteps)
    "volta_h884gemm_64x64_ldg8_nn",
    # V100 AMP (fp16 inputs, fp32 accumulation: cuBLAS/cuDNN's s884 kernels)
    "volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_nn",
    "volta_fp16_s884cudnn_fp16_256x128_ldg8_splitK_relu_f2f_exp_small_nhwc2nchw_tn_v1",
    "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16"
    "_stage4_warpsize2x2x1_g1_tensor16x8x8_alignc4_execute_kernel_cudnn",
    "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(Params)",
    # H100 (tracelens_h100_qwen_chat)
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_"
    "segment_k_off_kernel__5x_cublas",
    "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, "
    "false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, "
    "cutlass::bfloat16_t> >, false, true, false, false, false, true, false>"
    "(pytorch_flash::Flash_fwd_params)",
    # H100/H800/B200 cuBLASLt, CUTLASS 3, fp8/fp4, FlashAttention 2/3 (public profiles)
    "nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT",
    "nvjet_tss_64x8_64x16_2x1_v_bz_splitK_TNT",
    "sm100_xmma_gemm_bf16f16_bf16f16_bf16f32_tn_n_tilesize256x128x64_stage4_warpsize2x2x1",
    "cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x256x64_1x2x1_0_tnn_align8_warpspecialized",
    "sm90_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n_tilesize128x128x128_warpgroupsize1x1x1_execute_"
    "segment_k_off_kernel__5x_cublas",
    "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int>, "
    "cutlass::gemm::collective::CollectiveMma<cutlass::float_e4m3_t, cutlass::float_e5m2_t>>>",
    "void deep_gemm::fp8_gemm_kernel<128u, 4096u, 128u, 128u, 8u>(float*, int*, unsigned int)",
    "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::float_e2m1_t, "
    "cutlass::gemm::MainloopSm100TmaUmmaWarpSpecialized>>",
    "void flash_fwd_kernel<Flash_fwd_kernel_traits<(int)128, (int)128, (int)64, (int)4>>",
    "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8>>",
    "void flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90>>",
    "fmhaSm100aKernel_QkvE4m3OBfloat16HQk128HV128SeparateQkvCausalP64VarSeqQ128Kv128",
    # AMD MI250 / MI210 / MI300X (hta_mi250_rocm62, tracelens_mi210_gpu_only,
    # tracelens_mi300x_compile_triton, tracelens_mi300x_vllm_graph_replay)
    "Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0_AFC1_AFEM1_ISA90a",
    "Cijk_Ailk_Bjlk_BBS_BH_Bias_HAS_SAV_UserArgs_MT128x64x32_MI32x32x1_SN_LDSB0_AFC1_ISA90a",
    "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x192x64_MI16x16x1_SN_LDSB1_AFC1_ISA942",
    "igemm_fwd_gtcx2_nhwc_bf16_bx0_ex1_bt64x64x64_wt16x16x16_ws1x1_wr2x2_ta1x8x2x1_1x8x1x32",
    "attn_fwd",
    "kernel_unified_attention_3d", "kernel_unified_attention_2d",  # vLLM (Triton, tl.dot)
    "_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1_swiglu",
    "void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<ck::half_t>>",
    "__amd_rocclr_mfma_f32_32x32x8f16",
]

#: Real kernel names that must not count (elementwise, Triton pointwise/reduction, reduce,
#: copies, SIMT GEMMs, transposes, non-MFMA Tensile, fp8 KV-cache copies).
OTHER_NAMES = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)",
    "triton_poi_fused__unsafe_view_add_3",
    "triton_red_fused_add_mean_mul_pow_rsqrt_0",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, "
    "float, float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float>)",
    "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)"
    "::OpaqueType<2u>, unsigned int, 4, 64, 64>(at::native::OpaqueType<2u>*)",
    "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>"
    "(cutlass_80_simt_sgemm_128x32_8x5_nn_align1::Params)",
    "ampere_sgemm_32x32_sliced1x4_tn",
    "volta_sgemm_64x64_nn",
    "cudnn_ampere_scudnn_128x64_relu_xregs_large_nn_v1",
    "batched_transpose_16x64_pack_1x4_ediv_1x2_half",
    "Cijk_Ailk_Bljk_SB_MT64x64x8_SE_K1",   # Tensile without an MFMA (MI) tile
    "void vllm::reshape_and_cache_flash_kernel<__hip_bfloat16, __hip_bfloat16, "
    "(vllm::Fp8KVCacheDataType)0>(__hip_bfloat16 const*, int)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::float8_copy_kernel_cuda"
    "(at::TensorIteratorBase&)::{lambda(c10::Float8_e4m3fn)#1}>",
    "Memcpy DtoD (Device -> Device)",
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
]


@pytest.mark.parametrize("name", TENSOR_CORE_NAMES)
def test_tensor_core_kernels_of_every_generation_are_recognised(name):
    assert TENSOR_CORE_KERNEL.search(name)


@pytest.mark.parametrize("name", OTHER_NAMES)
def test_other_kernels_are_not_tensor_core_kernels(name):
    assert not TENSOR_CORE_KERNEL.search(name)


def test_lowercase_search_answers_as_ignorecase():
    """The list is searched in lower-cased names (issue 19: 3x faster than IGNORECASE on
    long C++ kernel names): same answers as the case-insensitive regex, in any case."""
    ignorecase = re.compile(TENSOR_CORE_KERNEL.pattern, re.IGNORECASE)
    names = TENSOR_CORE_NAMES + OTHER_NAMES
    for name in names + [n.upper() for n in names] + [n.swapcase() for n in names]:
        assert bool(TENSOR_CORE_KERNEL.search(name)) == bool(ignorecase.search(name)), name
    assert TENSOR_CORE_KERNEL.pattern == TENSOR_CORE_KERNEL.pattern.lower()


@pytest.mark.skipif(not have_shared(), reason=NO_SHARED)
def test_shared_mi300x_matrix_core_share():
    # three Tensile MFMA GEMMs (64.0 %) and Triton attn_fwd (29.4 %) of the kernel time; the
    # rest is triton_poi/red pointwise and reductions
    g = shared_views("tracelens_mi300x_compile_triton").get("overview", {})["gpu_metrics"]["gpus"]
    m = {x["name"]: x["value"] for x in g[0]["metrics"]}
    assert 93 < m["Kernel time using Matrix Cores"] < 94
    assert "Kernel time using Tensor Cores" not in m


def test_hopper_gemms_count_as_tensor_core_time():
    h100 = {"id": 0, "name": "NVIDIA H800", "computeMajor": 9, "computeMinor": 0, "numSms": 132}
    views = build_views(build([
        step(1, 0, 40),
        kernel("nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT", 0, 20),
        kernel("void deep_gemm::fp8_gemm_kernel<128u, 4096u>(float*)", 20, 10),
        kernel("triton_poi_fused_add_0", 30, 10),
    ], device_properties=[h100]))
    g = views.get("overview", {})["gpu_metrics"]["gpus"][0]
    assert {x["name"]: x["value"] for x in g["metrics"]}["Kernel time using Tensor Cores"] == 75.0
