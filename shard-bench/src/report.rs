//! `shard-bench report`: result files in, `report.md` (a markdown table), `throughput.svg`
//! (messages per second over time, one line per run) and `latency.svg` (p50 … max per run on a
//! log scale) out.
//!
//! The SVG is written by hand: two simple charts do not justify a plotting crate and its font
//! stack, and plain SVG renders in any browser and on GitHub.

use crate::error::{BenchError, Result};
use crate::result::{group, micros, BenchResult, Percentiles};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Tableau's 20 colours: the standard matrix has 18 runs, each needs its own.
const PALETTE: [&str; 20] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94",
    "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5",
];
const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 440.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;

/// The files a report consists of.
pub struct Written {
    pub markdown: PathBuf,
    pub throughput_svg: PathBuf,
    pub latency_svg: PathBuf,
}

/// Reads `inputs` and writes the report into `out`.
pub fn write_report(inputs: &[PathBuf], out: &Path, title: &str) -> Result<Written> {
    let results = inputs
        .iter()
        .map(|p| BenchResult::read(p))
        .collect::<Result<Vec<_>>>()?;
    std::fs::create_dir_all(out).map_err(|source| BenchError::File {
        path: out.to_path_buf(),
        source,
    })?;
    let written = Written {
        markdown: out.join("report.md"),
        throughput_svg: out.join("throughput.svg"),
        latency_svg: out.join("latency.svg"),
    };
    let md = format!(
        "## {title}\n\n{}\n![throughput](throughput.svg)\n\n![latency](latency.svg)\n",
        markdown_table(&results)
    );
    for (path, text) in [
        (&written.markdown, md),
        (&written.throughput_svg, throughput_svg(&results, title)),
        (&written.latency_svg, latency_svg(&results, title)),
    ] {
        std::fs::write(path, text).map_err(|source| BenchError::File {
            path: path.clone(),
            source,
        })?;
    }
    Ok(written)
}

/// One row per result.
pub fn markdown_table(results: &[BenchResult]) -> String {
    let mut s = String::from(
        "| run | mode | msgs/s | MB/s | ack p50 / p99 | e2e p50 | e2e p99 | e2e p99.9 | e2e max \
         | broker CPU µs/msg | broker peak RSS | host load | targets |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n",
    );
    for r in results {
        let ack = r.ack_latency_us.map_or("–".into(), |p| {
            format!("{} / {}", micros(p.p50), micros(p.p99))
        });
        let e2e = |f: fn(&Percentiles) -> f64| {
            r.e2e_latency_us
                .as_ref()
                .map_or("–".into(), |p| micros(f(p)))
        };
        let cpu = r.cpu_us_per_msg().map_or("–".into(), |v| format!("{v:.2}"));
        let rss = r.broker.map_or("–".into(), |b| {
            format!("{:.0} MB", b.peak_rss_kb as f64 / 1024.0)
        });
        let targets = r
            .targets
            .iter()
            .map(|t| format!("{} {}", if t.met { "✅" } else { "❌" }, t.goal))
            .collect::<Vec<_>>()
            .join("<br>");
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            escape_md(&r.label),
            r.mode,
            group(r.primary_rate()),
            r.primary_mb(),
            ack,
            e2e(|p| p.p50),
            e2e(|p| p.p99),
            e2e(|p| p.p999),
            e2e(|p| p.max),
            cpu,
            rss,
            r.host_load.map_or("–".into(), |l| format!("{l:.1}")),
            if targets.is_empty() {
                "–".into()
            } else {
                targets
            },
        );
    }
    s
}

fn escape_md(s: &str) -> String {
    s.replace('|', "\\|")
}

fn escape_xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn svg_open(title: &str, height: f64) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
         viewBox=\"0 0 {WIDTH} {height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"16\">{}</text>\n",
        WIDTH / 2.0,
        escape_xml(title)
    )
}

/// Round step for about `n` ticks up to `max`.
fn nice_step(max: f64, n: f64) -> f64 {
    let raw = (max / n).max(f64::MIN_POSITIVE);
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    mag * if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    }
}

fn legend(s: &mut String, results: &[BenchResult], y0: f64) {
    for (i, r) in results.iter().enumerate() {
        let (col, row) = ((i % 2) as f64, (i / 2) as f64);
        let x = LEFT + col * 430.0;
        let y = y0 + row * 18.0;
        let _ = writeln!(
            s,
            "<rect x=\"{x}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/>\
             <text x=\"{}\" y=\"{}\">{}</text>",
            y - 10.0,
            PALETTE[i % PALETTE.len()],
            x + 18.0,
            y,
            escape_xml(&r.label)
        );
    }
}

fn legend_height(n: usize) -> f64 {
    n.div_ceil(2) as f64 * 18.0 + 10.0
}

/// Messages per second (consumed if the run consumes, else published) against time.
pub fn throughput_svg(results: &[BenchResult], title: &str) -> String {
    let height = HEIGHT + legend_height(results.len());
    let mut s = svg_open(&format!("{title}: throughput over time"), height);
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let rate = |r: &BenchResult, i: usize| {
        let p = &r.series[i];
        if r.consumes() {
            p.sub_per_s
        } else {
            p.pub_per_s
        }
    };
    let max_t = results
        .iter()
        .flat_map(|r| r.series.iter().map(|p| p.t))
        .fold(1.0f64, f64::max);
    let max_y = results
        .iter()
        .flat_map(|r| (0..r.series.len()).map(move |i| rate(r, i)))
        .fold(1.0f64, f64::max)
        * 1.1;
    let y_step = nice_step(max_y, 5.0);
    let x_step = nice_step(max_t, 10.0).max(1.0);
    let px = |t: f64| LEFT + t / max_t * plot_w;
    let py = |v: f64| TOP + plot_h - v / max_y * plot_h;
    let mut v = 0.0;
    while v <= max_y {
        y_gridline(&mut s, py(v), &group(v));
        v += y_step;
    }
    let mut t = 0.0;
    while t <= max_t {
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{t}</text>",
            px(t),
            TOP + plot_h + 16.0
        );
        t += x_step;
    }
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">seconds</text>\
         <text x=\"16\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {})\">messages/s</text>\
         <rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{plot_w}\" height=\"{plot_h}\" fill=\"none\" stroke=\"#333\"/>",
        LEFT + plot_w / 2.0,
        TOP + plot_h + 36.0,
        TOP + plot_h / 2.0,
        TOP + plot_h / 2.0
    );
    for (i, r) in results.iter().enumerate() {
        let points: Vec<String> = (0..r.series.len())
            .map(|k| format!("{:.1},{:.1}", px(r.series[k].t), py(rate(r, k))))
            .collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke-width=\"2\" stroke=\"{}\" points=\"{}\"/>",
            PALETTE[i % PALETTE.len()],
            points.join(" ")
        );
    }
    legend(&mut s, results, HEIGHT + 4.0);
    s.push_str("</svg>\n");
    s
}

/// Latency percentiles per run: end-to-end where measured, else publish-ack.
pub fn latency_svg(results: &[BenchResult], title: &str) -> String {
    let height = HEIGHT + legend_height(results.len());
    let mut s = svg_open(
        &format!("{title}: latency percentiles (µs, log scale)"),
        height,
    );
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let chosen: Vec<Option<(Percentiles, &str)>> = results
        .iter()
        .map(|r| {
            r.e2e_latency_us
                .map(|p| (p, "e2e"))
                .or(r.ack_latency_us.map(|p| (p, "ack")))
        })
        .collect();
    let max_us = chosen
        .iter()
        .flatten()
        .map(|(p, _)| p.max)
        .fold(10.0f64, f64::max);
    let decades = max_us.log10().ceil().max(1.0);
    let py = |us: f64| TOP + plot_h - (us.max(1.0).log10() / decades) * plot_h;
    for d in 0..=(decades as i32) {
        let us = 10f64.powi(d);
        y_gridline(&mut s, py(us), &micros(us));
    }
    let _ = writeln!(
        s,
        "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{plot_w}\" height=\"{plot_h}\" fill=\"none\" stroke=\"#333\"/>"
    );
    let quantiles = ["p50", "p90", "p99", "p99.9", "max"];
    let group_w = plot_w / quantiles.len() as f64;
    let bar_w = (group_w * 0.8 / results.len().max(1) as f64).min(40.0);
    for (qi, q) in quantiles.iter().enumerate() {
        let gx = LEFT + qi as f64 * group_w + group_w * 0.1;
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{q}</text>",
            LEFT + qi as f64 * group_w + group_w / 2.0,
            TOP + plot_h + 16.0
        );
        for (ri, c) in chosen.iter().enumerate() {
            let Some((p, kind)) = c else { continue };
            let v = p.values()[qi].1;
            let x = gx + ri as f64 * bar_w;
            let y = py(v);
            let _ = writeln!(
                s,
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\">\
                 <title>{} {kind} {q}: {}</title></rect>",
                (bar_w - 2.0).max(1.0),
                (TOP + plot_h - y).max(0.5),
                PALETTE[ri % PALETTE.len()],
                escape_xml(&results[ri].label),
                micros(v)
            );
        }
    }
    legend(&mut s, results, HEIGHT + 4.0);
    s.push_str("</svg>\n");
    s
}

/// A horizontal grid line at `y` across the plot, labelled on the left.
fn y_gridline(s: &mut String, y: f64, label: &str) {
    let plot_w = WIDTH - LEFT - RIGHT;
    let _ = writeln!(
        s,
        "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\
         <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>",
        LEFT + plot_w,
        LEFT - 6.0,
        y + 4.0,
    );
}
