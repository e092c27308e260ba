"""The step-against-its-floor page (docs/results/roofline.md) in Markdown, from
scripts/results/roofline.sh's files: DIR/rows.jsonl (one `caprl bench transformer --json` row
per SIMD level), DIR/machine.json and DIR/run.json. scripts/results/render.py prints it."""
import measured

TASKS = ["xe_step", "greedy", "sample_5", "beam_5"]


def render(d):
    rows = measured.load_lines(d / "rows.jsonl")
    out = [
        "# The COCO-scale step against its floor",
        "",
        measured.line(d),
        "Regenerate on your machine with `cargo build --release && bash "
        "scripts/results/roofline.sh` (this page is rendered from [roofline/](roofline/) by "
        "`scripts/results/render.py`).",
        "",
        "The reference Transformer (6 + 6 layers, d_model 512, 8 heads, d_ff 2,048) at COCO's "
        "shape: 36 regions of 2,048 features, 10,000 words, captions of up to 16 words. "
        "`xe_step` is teacher forcing, backward, gradient clipping and AdamW over 50 captions "
        "(10 images × 5 references); the decodes are of 10 images (`sample_5`: 5 samples each, "
        "`beam_5`: beam width 5), with the key/value cache, EOS suppressed so every caption runs "
        "to 16 words. GFLOP are counted from the shapes (2 per multiply-add of the matrix "
        "products; each image encoded, and its cross-attention keys and values made, once): "
        "the work no implementation can skip. The peak is the multiply-add rate of all the "
        "threads at once on registers at that level (`fastmath::fma_peak_gflops`); at the "
        "`avx2` level caprl's own kernels are held to AVX2, while Candle's matrix products "
        "(the `gemm` crate) still choose their level from the CPU.",
        "",
        "| SIMD level | threads | peak GFLOP/s | task | ms | GFLOP | GFLOP/s | of peak | floor ms |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        peak = r["peak_gflops"]
        cells = [(t, r[t], r["gflop"][t]) for t in TASKS if r.get(t)]
        if r.get("xe_step") and r.get("sample_5"):
            cells.append(("xe_step + sample_5", r["xe_step"] + r["sample_5"],
                          r["gflop"]["xe_step"] + r["gflop"]["sample_5"]))
        for task, s, g in cells:
            out.append(f"| {measured.SIMD.get(r['simd'], r['simd'])} | {r['threads']} | "
                       f"{peak:.1f} | {task} | {s * 1e3:.0f} | {g:.1f} | {g / s:.1f} | "
                       f"{100 * g / s / peak:.0f}% | {1e3 * g / peak:.0f} |")
    out += [
        "",
        "`floor ms` is the task's GFLOP at the peak: the time it would take if every thread did "
        "nothing but multiply-adds; `ms` over `floor ms` is how far the task is from it.",
    ]
    return "\n".join(out) + "\n"
