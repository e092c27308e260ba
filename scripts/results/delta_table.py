"""The snapshot-delta page (docs/results/delta.md) in Markdown, from scripts/results/delta.sh's
files: DIR/rows.jsonl (one `caprl bench delta --json` report per learning rate),
DIR/machine.json and DIR/run.json. scripts/results/render.py prints it."""
import measured


def render(d):
    reports = measured.load_lines(d / "rows.jsonl")
    out = [
        "# What a policy version's delta weighs",
        "",
        measured.line(d),
        "Regenerate on your machine with `cargo build --release && bash scripts/results/delta.sh` "
        "(this page is rendered from [delta/](delta/) by `scripts/results/render.py`).",
        "",
        "The reference Transformer at COCO's shape (6 + 6 layers, d_model 512, 10,000 words) takes "
        "AdamW updates at each learning rate (5e-6 is the reference SCST stage's, "
        "`configs/transformer-nsc.toml`; 1e-4 the benchmark grid's RL rate), each on the XE loss "
        "of 50 captions of 10 images: Adam's steps are about the learning rate in size whatever "
        "the loss, so they change the values an SCST update at that rate would. After each "
        "update the policy snapshot is written in f32 and in bf16 and its delta against the "
        "version before is made (`caprl_common::snapshot_delta`: the XOR of the two snapshots in "
        "byte planes, LZ4-compressed, in chunks made and applied in parallel) and applied to the "
        "held snapshot in place, as a reader does, the rebuilt snapshot checked bit for bit. "
        "Means over the updates after the first (Adam's first step moves every value).",
        "",
        "| lr | snapshot | MB | values changed | delta MB | delta / snapshot | make ms | "
        "rebuild + check ms | update ms | rebuild / update |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in reports:
        update_ms = r["update_seconds"] * 1e3
        for row in r["rows"]:
            mb = row["snapshot_bytes"] / 1e6
            out.append(
                f"| {r['lr']:g} | {row['dtype']} | {mb:.1f} | {100 * row['changed_values']:.1f}% | "
                f"{row['delta_bytes'] / 1e6:.1f} | "
                f"{100 * row['delta_bytes'] / row['snapshot_bytes']:.1f}% | {row['encode_ms']:.0f} | "
                f"{row['apply_ms']:.0f} | {update_ms:.0f} | {100 * row['apply_ms'] / update_ms:.1f}% |")
    first = reports[0]
    out += ["", f"{first['steps']} updates per rate, {first['threads']} threads, SIMD level "
            f"{measured.SIMD.get(first['simd'], first['simd'])}."]
    return "\n".join(out) + "\n"
