//! Report generation from canned results: a markdown table and two SVG charts.

mod common;

use shard_bench::report::{markdown_table, write_report};

#[test]
fn the_table_has_one_row_per_result_with_rates_latencies_cpu_and_targets() {
    let results = [
        common::canned("ingest", "pub", 1_600_000.0),
        common::canned("pub|sub", "pubsub", 1_000_000.0),
    ];
    let table = markdown_table(&results);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    assert!(lines[0].starts_with("| run | mode | msgs/s"));
    assert!(
        lines[2].contains("| ingest | pub | 1,600,000 | 320.0 |"),
        "{}",
        lines[2]
    );
    assert!(
        lines[2].contains("| 0.80 |"),
        "ingest cpu per published: {}",
        lines[2]
    );
    assert!(
        lines[3].starts_with("| pub\\|sub | pubsub | 1,000,000 |"),
        "{}",
        lines[3]
    );
    assert!(
        lines[3].contains("| 0.55 |"),
        "pubsub cpu per consumed: {}",
        lines[3]
    );
    assert!(lines[3].contains("❌ sub_rate>=1200000"));
    assert!(lines[3].contains("✅ cpu_us_per_sub<=0.6"));
    assert!(
        lines[3].contains("150µs") && lines[3].contains("750µs") && lines[3].contains("1.50ms")
    );
    assert!(lines[3].contains("200 MB"));
}

#[test]
fn report_writes_markdown_and_svg_charts() {
    let dir = std::env::temp_dir().join(format!("shard-bench-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut inputs = Vec::new();
    for (i, (label, mode)) in [("ingest <4>", "pub"), ("drain", "sub")].iter().enumerate() {
        let p = dir.join(format!("r{i}.json"));
        common::canned(label, mode, 1_000_000.0 * (i + 1) as f64)
            .write(&p)
            .unwrap();
        inputs.push(p);
    }
    let out = dir.join("out");
    let w = write_report(&inputs, &out, "matrix").expect("report");
    let md = std::fs::read_to_string(&w.markdown).unwrap();
    assert!(md.contains("## matrix") && md.contains("![throughput](throughput.svg)"));
    assert!(md.contains("| drain | sub | 2,000,000 |"));
    for svg_path in [&w.throughput_svg, &w.latency_svg] {
        let svg = std::fs::read_to_string(svg_path).unwrap();
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("ingest &lt;4&gt;"), "labels are escaped");
        assert!(
            !svg.contains("NaN"),
            "no NaN coordinates in {}",
            svg_path.display()
        );
    }
    let throughput = std::fs::read_to_string(&w.throughput_svg).unwrap();
    assert_eq!(throughput.matches("<polyline").count(), 2);
    let latency = std::fs::read_to_string(&w.latency_svg).unwrap();
    assert_eq!(
        latency.matches("<rect x=").count() - 2 - 1,
        10,
        "5 bars per run, plus frame and 2 legend keys"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
