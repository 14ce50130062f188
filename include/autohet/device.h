/* GPU device catalog: datasheet figures for the device types autohet knows. */
#ifndef AUTOHET_DEVICE_H
#define AUTOHET_DEVICE_H
#include <stddef.h>

typedef struct {
    char name[32];       /* canonical name, e.g. "A100-40G" */
    double peak_tflops;  /* dense bf16/fp16 tensor-core peak, TFLOP/s */
    double mem_gib;      /* HBM/GDDR capacity, GiB */
    double mem_bw_gbs;   /* memory bandwidth, GB/s */
    double intra_bw_gbs; /* per-GPU intra-node link bandwidth, GB/s, one direction (NVLink or PCIe) */
    double nic_gbit;     /* default inter-node NIC bandwidth per node, Gbit/s */
    double efficiency;   /* GPUs (sm_count > 0): the fraction of peak a GEMM reaches with full waves of
                            full tiles (calibrated GEMM model, docs/calibration.md); other devices: the
                            fraction of peak every layer reaches (plain roofline) */
    double slowdown;     /* engine emulation factor for one-machine runs; 1 on real hardware */
    /* Added for the calibrated GEMM model; 0 = unknown. A device with
     * sm_count 0 (the CPU devices, a new device given without it) is costed by
     * the plain roofline with `efficiency`. */
    double sm_count;    /* streaming multiprocessors (wave quantization) */
    double fp32_tflops; /* dense fp32 GEMM peak: TF32 tensor cores from Ampere on, CUDA cores before */
} ah_device;

/* A device catalog is a value: the built-in one is immutable; --devices
 * overrides are applied to a copy, which is then passed to what reads device
 * names (cluster parsing, plan documents, the CLI commands). */
#define AH_MAX_DEVICES 64
typedef struct {
    int n;
    ah_device dev[AH_MAX_DEVICES];
} ah_device_catalog;

/* The built-in catalog (datasheet figures). */
const ah_device_catalog *ah_device_catalog_builtin(void);
/* Case-insensitive lookup in *cat; accepts aliases such as "A100-40",
 * "A100_40GB", "H100", "V100-16". NULL if unknown. */
const ah_device *ah_device_find(const ah_device_catalog *cat, const char *name);
/* Override or extend *cat from a JSON file:
 * {"devices":[{"name":..., "peak_tflops":..., "mem_gib":..., ...}]}
 * Fields that are absent keep their catalog values (new names need all of
 * peak_tflops, mem_gib, mem_bw_gbs). Returns 0, or -1 with a one-line error
 * and *cat unchanged. */
int ah_device_load_overrides(ah_device_catalog *cat, const char *path, char *err, size_t errlen);

#endif
