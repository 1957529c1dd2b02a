//! nsqd's `nsqd.dat`: the topics and channels an nsqd data directory holds, their paused
//! state, and the nsqd version that wrote it. Only nsqd 1.0 to 1.3 are accepted: their queue
//! and metadata formats are the ones `diskqueue.rs` reads; anything else is refused whole.

use super::ImportError;
use serde::Deserialize;
use std::path::Path;

/// The metadata file nsqd 1.x keeps in its data path.
pub const NSQD_DAT: &str = "nsqd.dat";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NsqdMeta {
    pub version: String,
    pub topics: Vec<NsqdTopic>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct NsqdTopic {
    pub name: String,
    #[serde(default)]
    pub paused: bool,
    #[serde(default)]
    pub channels: Vec<NsqdChannel>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct NsqdChannel {
    pub name: String,
    #[serde(default)]
    pub paused: bool,
}

#[derive(Deserialize)]
struct File {
    version: Option<String>,
    topics: Option<Vec<NsqdTopic>>,
}

/// Reads and checks `<dir>/nsqd.dat`.
pub fn read(dir: &Path) -> Result<NsqdMeta, ImportError> {
    let path = dir.join(NSQD_DAT);
    let bytes = std::fs::read(&path).map_err(|source| ImportError::Read {
        path: path.clone(),
        source,
    })?;
    parse(&bytes).map_err(|why| match why {
        Refused::Version(version) => ImportError::UnknownVersion { path, version },
        Refused::Json(reason) => ImportError::NotNsqdMeta { path, reason },
    })
}

enum Refused {
    Version(String),
    Json(String),
}

fn parse(bytes: &[u8]) -> Result<NsqdMeta, Refused> {
    let file: File = serde_json::from_slice(bytes).map_err(|e| Refused::Json(e.to_string()))?;
    let version = file.version.unwrap_or_default();
    if !supported(&version) {
        return Err(Refused::Version(version));
    }
    let topics = file
        .topics
        .ok_or_else(|| Refused::Json("no \"topics\" list".to_string()))?;
    Ok(NsqdMeta { version, topics })
}

/// nsqd 1.0 to 1.3 (a pre-release or build suffix allowed: `1.2.1-alpha`, `1.3.0+git`).
fn supported(version: &str) -> bool {
    let core = version.split(['-', '+']).next().unwrap_or("");
    let mut parts = core.split('.');
    let (Some(major), Some(minor), Some(patch), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    number(major)
        && number(minor)
        && number(patch)
        && major == "1"
        && minor.len() == 1
        && minor <= "3"
}

/// Whether `dir` holds only the metadata of nsqd before 1.0 (`nsqd.<id>.dat`), whose
/// layout this importer does not read.
pub fn pre_v1_file(dir: &Path) -> Option<String> {
    let entries = std::fs::read_dir(dir).ok()?;
    entries.filter_map(|e| e.ok()).find_map(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        let id = name.strip_prefix("nsqd.")?.strip_suffix(".dat")?;
        (!id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())).then_some(name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_nsqd_1_3_writes() {
        let m = parse(
            br#"{"topics":[{"channels":[{"name":"c","paused":true}],"name":"t","paused":false}],"version":"1.3.0"}"#,
        )
        .ok()
        .unwrap();
        assert_eq!(m.version, "1.3.0");
        assert_eq!(m.topics[0].name, "t");
        assert!(m.topics[0].channels[0].paused);
    }

    #[test]
    fn versions_outside_1_0_to_1_3_are_refused() {
        for ok in ["1.0.0-compat", "1.1.0", "1.2.1", "1.3.0", "1.3.0-alpha+x"] {
            assert!(supported(ok), "{ok}");
        }
        for refused in [
            "", "0.3.8", "2.0.0", "1.4.0", "1.10.0", "1.3", "v1.3.0", "1.3.0.1",
        ] {
            assert!(!supported(refused), "{refused}");
        }
        assert!(matches!(
            parse(br#"{"topics":[],"version":"0.3.8"}"#),
            Err(Refused::Version(v)) if v == "0.3.8"
        ));
        assert!(matches!(parse(br#"{"topics":[]}"#), Err(Refused::Version(v)) if v.is_empty()));
        assert!(matches!(parse(b"not json"), Err(Refused::Json(_))));
        assert!(matches!(
            parse(br#"{"version":"1.3.0"}"#),
            Err(Refused::Json(_))
        ));
    }
}
