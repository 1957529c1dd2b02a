//! The page and its static files, as nsqadmin serves them under its base path: the page
//! (`index.html`) at `/` and at every path-style URL the page routes by (`/topics`,
//! `/topics/:topic`, `/topics/:topic/:channel`, `/nodes`, `/nodes/:node`, `/counter`,
//! `/lookup`), and the files at `/static/:asset` and `/fonts/:asset`, built in or, with
//! `--dev-static-dir`, read from that directory at each request.
//!
//! Invariants: the page is rendered once at start-up with the base path (its links, its
//! static files) and the Graphite settings the page needs (`data-settings` on `<body>`), every
//! value HTML-escaped; an asset name is one path segment, never `.` or `..`, so a request can
//! never read outside `--dev-static-dir`.

use crate::graphite::GraphiteSettings;
use http1::Response;
use std::path::PathBuf;

const INDEX_HTML: &str = include_str!("../static/index.html");
const APP_JS: &str = include_str!("../static/app.js");
const RATES_JS: &str = include_str!("../static/rates.js");
const HISTORY_JS: &str = include_str!("../static/history.js");
const STYLE_CSS: &str = include_str!("../static/style.css");

/// The rendered page and where the static files come from.
pub struct Pages {
    index: String,
    dev_static_dir: Option<PathBuf>,
}

/// `s` fit for an HTML attribute value or text.
fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The content type of a static file, by its extension (as Go's `mime.TypeByExtension` and
/// nsqadmin's own list).
fn content_type(name: &str) -> &'static str {
    let ext = name.rsplit_once('.').map_or("", |(_, e)| e);
    match ext {
        "js" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "html" => "text/html; charset=utf-8",
        "png" => "image/png",
        "svg" => "image/svg+xml",
        "map" | "json" => "application/json",
        "woff" => "application/font-woff",
        "woff2" => "application/font-woff2",
        "ttf" => "application/font-sfnt",
        "eot" => "application/vnd.ms-fontobject",
        _ => "application/octet-stream",
    }
}

/// Whether `parts` (the path under the base path, split at `/`) is one of the page's URLs.
pub fn is_page(parts: &[&str]) -> bool {
    matches!(
        parts,
        [""] | ["topics"]
            | ["topics", _]
            | ["topics", _, _]
            | ["nodes"]
            | ["nodes", _]
            | ["counter"]
            | ["lookup"]
    ) && parts.iter().skip(1).all(|p| !p.is_empty())
}

impl Pages {
    /// The page rendered for `base_path` (`""` or `/a/b`) and the Graphite settings.
    pub fn new(
        base_path: &str,
        graphite: &GraphiteSettings,
        dev_static_dir: Option<PathBuf>,
    ) -> Pages {
        let settings = serde_json::json!({
            "graphite_enabled": graphite.url.is_some(),
            "graphite_url": graphite.url.as_ref().map(|u| u.text.clone()).unwrap_or_default(),
            "proxy_graphite": graphite.proxy,
            "statsd_prefix": graphite.statsd_prefix,
            "statsd_counter_format": graphite.statsd_counter_format,
            "statsd_gauge_format": graphite.statsd_gauge_format,
            "statsd_interval": graphite.statsd_interval.as_secs(),
        });
        let index = INDEX_HTML
            .replace("{{base}}", &html_escape(base_path))
            .replace("{{settings}}", &html_escape(&settings.to_string()));
        Pages {
            index,
            dev_static_dir,
        }
    }

    /// The page.
    pub fn index(&self) -> Response {
        Response::empty(200)
            .with_header("Content-Type", "text/html; charset=utf-8")
            .with_header("Cache-Control", "no-cache")
            .with_body(self.index.clone())
    }

    /// `/static/{name}` or `/fonts/{name}`: 404 `NOT_FOUND` (plain text, as nsqadmin) when
    /// there is no such file.
    pub fn asset(&self, name: &str) -> Response {
        let not_found = || Response::text(404, "NOT_FOUND");
        if name.is_empty() || name == "." || name == ".." || name.contains('/') {
            return not_found();
        }
        let body: bytes::Bytes = match &self.dev_static_dir {
            Some(dir) => {
                let path = dir.join(name);
                tracing::debug!("using dev dir {} for static asset {name:?}", dir.display());
                match std::fs::read(&path) {
                    Ok(b) => b.into(),
                    Err(_) => return not_found(),
                }
            }
            None => match name {
                "app.js" => APP_JS.into(),
                "rates.js" => RATES_JS.into(),
                "history.js" => HISTORY_JS.into(),
                "style.css" => STYLE_CSS.into(),
                _ => return not_found(),
            },
        };
        Response::empty(200)
            .with_header("Content-Type", content_type(name))
            .with_header("Cache-Control", "no-cache")
            .with_body(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_urls_as_nsqadmin() {
        for ok in [
            &[""][..],
            &["topics"],
            &["topics", "t"],
            &["topics", "t", "c"],
            &["nodes"],
            &["nodes", "h:4151"],
            &["counter"],
            &["lookup"],
        ] {
            assert!(is_page(ok), "{ok:?}");
        }
        for no in [
            &["topics", ""][..],
            &["topics", "t", "c", "x"],
            &["nodes", "n", "x"],
            &["elsewhere"],
            &["counter", "x"],
        ] {
            assert!(!is_page(no), "{no:?}");
        }
    }

    #[test]
    fn escaped_and_typed() {
        assert_eq!(
            html_escape(r#"<a href="x">'&'"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;"
        );
        assert_eq!(content_type("app.js"), "text/javascript; charset=utf-8");
        assert_eq!(content_type("x"), "application/octet-stream");
    }
}
