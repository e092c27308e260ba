"""The policy-broadcast page (docs/results/broadcast.md) in Markdown, from
scripts/results/broadcast.sh's files: DIR/rows.jsonl (one `caprl bench broadcast --json` report
per cache setting), DIR/machine.json and DIR/run.json. scripts/results/render.py prints it."""
import measured


def render(d):
    reports = measured.load_lines(d / "rows.jsonl")
    first = reports[0]
    snapshot_mb = first["snapshot_bytes"] / 1e6
    out = [
        "# How a policy version reaches its actors",
        "",
        measured.line(d),
        "Regenerate on your machine with `cargo build --release && bash scripts/results/broadcast.sh` "
        "(this page is rendered from [broadcast/](broadcast/) by `scripts/results/render.py`).",
        "",
        f"The reference Transformer at COCO's shape takes an AdamW update at lr {first['lr']:g} "
        "(the reference SCST stage's) before each version; its "
        f"{first['dtype']} snapshot ({snapshot_mb:.1f} MB) is stored by a learner's bus through a "
        f"real nats-server, whole every {first['full_every']} versions and as a delta against the "
        "one before in between (`runtime.snapshot_full_every`), and fetched by readers of their "
        "own connections as actors fetch it: the deltas after the version each holds, each "
        "checked, the result checked against the version's checksum. *MB in* is what the "
        "server took in (the learner's put), *MB out* what it sent (the readers' fetches); the "
        "time runs from the start of the publish to the last reader holding the checked bytes "
        "(an actor's load into its model comes after). All processes share the machine's "
        "cores, so the times at many readers include their contention for them.",
    ]
    for r in reports:
        k = r["readers_per_host"]
        level = measured.SIMD.get(r["simd"], r["simd"])
        title = (f"{level}: every reader fetches its own copy" if k == 0 else
                 f"{level}: {k} readers per host share a cache (`runtime.snapshot_cache_dir`)")
        out += ["", f"## {title}", "",
                "| readers | version | stored as | MB in | MB out | out per reader, of a snapshot "
                "| publish ms | publish to last reader ms |",
                "|---:|---:|---|---:|---:|---:|---:|---:|"]
        for row in r["rows"]:
            per_reader = row["out_bytes"] / row["readers"] / r["snapshot_bytes"]
            out.append(
                f"| {row['readers']} | {row['version']} | "
                f"{'delta' if row['delta'] else 'whole'} | {row['in_bytes'] / 1e6:.1f} | "
                f"{row['out_bytes'] / 1e6:.1f} | {100 * per_reader:.1f}% | "
                f"{row['publish_ms']:.0f} | {row['last_reader_ms']:.0f} |")
    out += ["", f"{first['threads']} threads; the SIMD level of each table in its heading."]
    return "\n".join(out) + "\n"
