//! The import end to end on files: an nsqd directory made here, staged, committed, and what
//! the broker's data path then holds; the refusals and the resumption of a staged import.

use super::*;
use crate::storage::meta;
use crate::storage::segment::{self, Format};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nsqd-import-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn record(out: &mut Vec<u8>, n: u64, attempts: u16, body: &str) {
    out.extend_from_slice(&((26 + body.len()) as u32).to_be_bytes());
    out.extend_from_slice(&(1_700_000_000_000_000_000i64 + n as i64).to_be_bytes());
    out.extend_from_slice(&attempts.to_be_bytes());
    out.extend_from_slice(format!("{:016x}", 0x1d00 + n).as_bytes());
    out.extend_from_slice(body.as_bytes());
}

/// A queue with `msgs` (n, attempts), the first `consumed` of them already read by nsqd.
fn queue(dir: &Path, name: &str, msgs: &[(u64, u16)], consumed: usize) {
    let mut data = Vec::new();
    let mut read_pos = 0;
    for (i, &(n, attempts)) in msgs.iter().enumerate() {
        if i == consumed {
            read_pos = data.len();
        }
        record(&mut data, n, attempts, &format!("{name}-{n}"));
    }
    if consumed >= msgs.len() {
        read_pos = data.len();
    }
    std::fs::write(dir.join(format!("{name}.diskqueue.000000.dat")), &data).unwrap();
    let meta = format!(
        "{}\n0,{read_pos}\n0,{}\n",
        msgs.len() - consumed,
        data.len()
    );
    std::fs::write(dir.join(format!("{name}.diskqueue.meta.dat")), meta).unwrap();
}

/// t (channels a, b paused), its queue 3 messages; a's queue 1 consumed, 2 fresh, 1 owed.
fn nsqd_dir(dir: &Path, version: &str) {
    std::fs::write(
        dir.join("nsqd.dat"),
        format!(
            r#"{{"topics":[{{"channels":[{{"name":"a","paused":false}},{{"name":"b","paused":true}}],"name":"t","paused":false}}],"version":"{version}"}}"#
        ),
    )
    .unwrap();
    queue(dir, "t", &[(1, 0), (2, 0), (3, 0)], 0);
    queue(dir, "t:a", &[(10, 0), (11, 0), (12, 2), (13, 0)], 1);
}

fn records(topic_dir: &Path) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    let mut segs: Vec<PathBuf> = std::fs::read_dir(topic_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    segs.sort();
    for p in segs {
        let bytes = bytes::Bytes::from(std::fs::read(&p).unwrap());
        let mut off = segment::HEADER_LEN;
        while let segment::Parsed::Record(s, next) = segment::parse_at(&bytes, Format::V2, off) {
            out.push((s.seq, s.msg.id.to_string()));
            off = next;
        }
        assert_eq!(segment::scan(&bytes, Format::V2).skipped, vec![]);
    }
    out
}

#[test]
fn a_data_path_that_is_an_nsqd_directory_is_imported_once() {
    let dp = scratch("once");
    nsqd_dir(&dp, "1.3.0");
    let before: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dp)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| (p.clone(), std::fs::read(&p).unwrap()))
        .collect();
    at_startup(&dp, 1 << 20).unwrap();
    let t = dp.join("t");
    // owed (a's attempts-2 message), a's own (11, 13), the topic queue (1, 2, 3).
    let ids: Vec<(u64, String)> = records(&t);
    let want: Vec<(u64, String)> = [12u64, 11, 13, 1, 2, 3]
        .iter()
        .enumerate()
        .map(|(seq, n)| (seq as u64, format!("{:016x}", 0x1d00 + n)))
        .collect();
    assert_eq!(ids, want);
    let m = meta::read(&t).unwrap().unwrap();
    assert!(m.clean && !m.paused && m.visible_end.is_none());
    assert_eq!(m.channels[0].name, "a");
    assert_eq!(m.channels[0].cursor, 1);
    assert_eq!(m.channels[0].pending.len(), 1);
    assert_eq!(
        (
            m.channels[0].pending[0].seq,
            m.channels[0].pending[0].attempts
        ),
        (0, 2)
    );
    assert_eq!(m.channels[0].foreign, Vec::<[u64; 2]>::new());
    assert_eq!(
        (m.channels[1].name.as_str(), m.channels[1].paused),
        ("b", true)
    );
    assert_eq!(m.channels[1].cursor, 3);
    // nsqd's files as they were; the import recorded; a second start does nothing.
    for (p, bytes) in &before {
        assert_eq!(&std::fs::read(p).unwrap(), bytes, "{}", p.display());
    }
    let record = marker::read(&dp).unwrap();
    assert_eq!(record.imports.len(), 1);
    assert_eq!(record.imports[0].messages, 6);
    assert!(!dp.join(STAGING).exists());
    at_startup(&dp, 1 << 20).unwrap();
    assert_eq!(marker::read(&dp).unwrap(), record);
    std::fs::remove_dir_all(&dp).unwrap();
}

#[test]
fn refusals_write_nothing() {
    for version in ["0.3.8", "2.0.0", ""] {
        let dp = scratch("version");
        nsqd_dir(&dp, version);
        let e = at_startup(&dp, 1 << 20).unwrap_err();
        assert!(matches!(e, ImportError::UnknownVersion { .. }), "{e}");
        assert!(e.to_string().contains(&format!("\"{version}\"")), "{e}");
        assert!(!dp.join("t").exists() && !dp.join(STAGING).exists());
        assert!(!dp.join(marker::MARKER_FILE).exists());
        std::fs::remove_dir_all(&dp).unwrap();
    }
    // A topic the data path already holds: nothing staged, nothing moved.
    let dp = scratch("exists");
    nsqd_dir(&dp, "1.2.1");
    std::fs::create_dir(dp.join("t")).unwrap();
    let e = at_startup(&dp, 1 << 20).unwrap_err();
    assert!(
        matches!(e, ImportError::TopicExists { ref topic, .. } if topic == "t"),
        "{e}"
    );
    assert!(!dp.join(STAGING).exists());
    std::fs::remove_dir_all(&dp).unwrap();
    // nsqd before 1.0.
    let dp = scratch("prev1");
    std::fs::write(dp.join("nsqd.123.dat"), b"{}").unwrap();
    assert!(matches!(
        at_startup(&dp, 1 << 20),
        Err(ImportError::PreV1 { .. })
    ));
    std::fs::remove_dir_all(&dp).unwrap();
}

#[test]
fn a_staged_import_is_finished_and_an_incomplete_one_removed() {
    let src = scratch("src");
    nsqd_dir(&src, "1.3.0");
    let dp = scratch("dst");
    let s = survey(&src).unwrap();
    stage(&s, &dp, 1 << 20, marker::fingerprint(&src).unwrap()).unwrap();
    assert!(matches!(
        stage(&s, &dp, 1 << 20, "x".into()),
        Err(ImportError::AlreadyStaged { .. })
    ));
    // A start finishes it (as after a crash among the moves, or for a running broker).
    at_startup(&dp, 1 << 20).unwrap();
    assert!(dp.join("t").join("meta.json").exists());
    assert!(!dp.join(STAGING).exists());
    assert_eq!(marker::read(&dp).unwrap().imports.len(), 1);
    // A build without its completion mark is dropped, not applied.
    std::fs::create_dir_all(dp.join(STAGING).join("u")).unwrap();
    assert!(commit(&dp).unwrap().is_none());
    assert!(!dp.join(STAGING).exists() && !dp.join("u").exists());
    std::fs::remove_dir_all(&src).unwrap();
    std::fs::remove_dir_all(&dp).unwrap();
}

#[test]
fn a_paused_topic_shows_its_channels_only_their_own() {
    let dp = scratch("paused");
    std::fs::write(
        dp.join("nsqd.dat"),
        r#"{"topics":[{"channels":[{"name":"a"},{"name":"b"}],"name":"p","paused":true}],"version":"1.2.1"}"#,
    )
    .unwrap();
    queue(&dp, "p", &[(1, 0), (2, 0)], 0);
    queue(&dp, "p:a", &[(10, 0)], 0);
    queue(&dp, "p:b", &[(20, 0), (21, 0)], 0);
    at_startup(&dp, 1 << 20).unwrap();
    let m = meta::read(&dp.join("p")).unwrap().unwrap();
    // a's own [0,1), b's own [1,3), topic [3,5): held at 3 until the unpause.
    assert_eq!(m.visible_end, Some(3));
    assert_eq!(m.channels[0].cursor, 0);
    assert_eq!(m.channels[0].foreign, vec![[1, 3]]);
    assert_eq!(m.channels[1].cursor, 1);
    std::fs::remove_dir_all(&dp).unwrap();
}
