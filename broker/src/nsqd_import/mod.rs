//! Importing an nsqd data directory (nsqd 1.0 to 1.3) into the broker's own storage, so that
//! a host moves from nsqd to the broker with every message nsqd held on disk: `nsqd.dat`
//! (topics, channels, paused state, `nsqd_meta.rs`) and the disk queues (`diskqueue.rs`),
//! written as the broker's topics (`layout.rs`).
//!
//! Invariants:
//! - nsqd's files are only read: never written, moved or deleted, so a rollback to nsqd
//!   finds them as they were.
//! - All or nothing: every topic is built under `nsqd-import~staging/` of the data path (`~`
//!   is in no topic name) and synced; `staged.json` there says the build is complete; only
//!   then are the topics moved into the data path ([`commit`]). A start that finds a complete
//!   staging (a crash among the moves, or an import staged for a running broker) finishes it;
//!   an incomplete one is removed.
//! - Once: the data path's `nsqd-import.json` (`marker.rs`) records each import's source and
//!   a fingerprint of its files; a start whose nsqd files match an entry imports nothing.
//! - Where nsqd would have delivered: a topic queue's messages to every channel of the
//!   topic, a channel queue's to that channel only, with nsqd's ID, timestamp and attempts.
//!   Queues nsqd.dat does not name are left, as nsqd leaves them, and said so.
//! - A version other than nsqd 1.0 to 1.3, a topic the data path already holds, or too
//!   little free space refuses the whole import before anything is written.

mod diskqueue;
mod error;
mod layout;
mod marker;
mod nsqd_meta;

pub mod cli;

pub use error::ImportError;

use diskqueue::{Damage, QueueFiles, Start};
use layout::{ChannelPlan, SegmentWriter};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tracing::{info, warn};

/// The staging area in a data path.
pub const STAGING: &str = "nsqd-import~staging";
/// In the staging area: the build is complete, and what it imports (a [`marker::Marker`]).
const STAGED: &str = "staged.json";

/// Messages and their body bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Count {
    pub messages: u64,
    pub bytes: u64,
}

impl Count {
    fn add(&mut self, body: usize) {
        self.messages += 1;
        self.bytes += body as u64;
    }
}

#[derive(Debug, Clone)]
pub struct ChannelSurvey {
    pub name: String,
    pub paused: bool,
    /// Messages of its queue nsqd had not delivered yet.
    pub own: Count,
    /// Messages of its queue nsqd had delivered before (in flight or requeued at its stop).
    pub owed: Count,
    queue: Option<QueueFiles>,
}

#[derive(Debug, Clone)]
pub struct TopicSurvey {
    pub name: String,
    pub paused: bool,
    /// Messages of the topic's queue (each for every channel).
    pub queue: Count,
    pub channels: Vec<ChannelSurvey>,
    files: Option<QueueFiles>,
}

/// What an nsqd data directory holds, read whole (what a dry run prints).
#[derive(Debug, Clone)]
pub struct Survey {
    pub dir: PathBuf,
    pub version: String,
    pub topics: Vec<TopicSurvey>,
    pub damage: Damage,
    /// What is not imported or read differently, for the log and the dry run.
    pub notes: Vec<String>,
}

impl Survey {
    pub fn channels(&self) -> u64 {
        self.topics.iter().map(|t| t.channels.len() as u64).sum()
    }

    pub fn total(&self) -> Count {
        let mut c = Count::default();
        for t in &self.topics {
            c.messages += t.queue.messages;
            c.bytes += t.queue.bytes;
            for ch in &t.channels {
                c.messages += ch.own.messages + ch.owed.messages;
                c.bytes += ch.own.bytes + ch.owed.bytes;
            }
        }
        c
    }

    /// The one-line summary (the log's and the command's).
    pub fn summary(&self) -> String {
        let total = self.total();
        format!(
            "nsqd {} data from {}: {} topics, {} channels, {} messages, {} bytes, {} damaged records skipped",
            self.version,
            self.dir.display(),
            self.topics.len(),
            self.channels(),
            total.messages,
            total.bytes,
            self.damage.records
        )
    }

    /// One line per topic and channel.
    pub fn details(&self) -> Vec<String> {
        let paused = |p: bool| if p { " (paused)" } else { "" };
        let mut lines = Vec::new();
        for t in &self.topics {
            lines.push(format!(
                "topic {}{}: {} messages in its queue, for every channel",
                t.name,
                paused(t.paused),
                t.queue.messages
            ));
            for c in &t.channels {
                lines.push(format!(
                    "  channel {}{}: {} messages of its own, {} of them delivered before",
                    c.name,
                    paused(c.paused),
                    c.own.messages + c.owed.messages,
                    c.owed.messages
                ));
            }
        }
        lines
    }

    /// Bytes the import writes: every record in the broker's format, and a header a segment.
    fn bytes_needed(&self, max_bytes_per_file: u64) -> u64 {
        let total = self.total();
        let records = total.bytes + total.messages * crate::storage::segment::BODY_AT as u64;
        let segments = records / max_bytes_per_file.max(1) + 1 + self.topics.len() as u64;
        records + segments * crate::storage::segment::HEADER_LEN as u64
    }
}

/// Reads nsqd's metadata and every queue it names, counting (nothing is written).
pub fn survey(dir: &Path) -> Result<Survey, ImportError> {
    if !dir.join(nsqd_meta::NSQD_DAT).exists() {
        if let Some(file) = nsqd_meta::pre_v1_file(dir) {
            return Err(ImportError::PreV1 {
                dir: dir.to_path_buf(),
                file,
            });
        }
        return Err(ImportError::NotNsqdDir {
            dir: dir.to_path_buf(),
        });
    }
    let meta = nsqd_meta::read(dir)?;
    let mut queues = diskqueue::list(dir).map_err(|source| ImportError::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut survey = Survey {
        dir: dir.to_path_buf(),
        version: meta.version.clone(),
        topics: Vec::new(),
        damage: Damage::default(),
        notes: Vec::new(),
    };
    for t in &meta.topics {
        if !protocol::names::is_valid_topic_name(&t.name) || protocol::names::is_ephemeral(&t.name)
        {
            survey.notes.push(format!(
                "topic {:?} in nsqd.dat is not a topic name; left",
                t.name
            ));
            continue;
        }
        let files = queues.remove(&t.name);
        let queue = count(dir, &t.name, files.as_ref(), &mut survey)?;
        let mut channels = Vec::new();
        for c in &t.channels {
            if !protocol::names::is_valid_channel_name(&c.name)
                || protocol::names::is_ephemeral(&c.name)
            {
                survey.notes.push(format!(
                    "channel {:?} of topic {} in nsqd.dat is not a channel name; left",
                    c.name, t.name
                ));
                continue;
            }
            let name = format!("{}:{}", t.name, c.name);
            let files = queues.remove(&name);
            let mut own = Count::default();
            let mut owed = Count::default();
            if let Some(f) = &files {
                let damage = read_queue(dir, &name, f, &mut survey.notes, |m| {
                    if m.attempts > 0 {
                        owed.add(m.body.len());
                    } else {
                        own.add(m.body.len());
                    }
                    Ok(())
                })?;
                note_damage(&mut survey, &name, damage);
            }
            channels.push(ChannelSurvey {
                name: c.name.clone(),
                paused: c.paused,
                own,
                owed,
                queue: files,
            });
        }
        survey.topics.push(TopicSurvey {
            name: t.name.clone(),
            paused: t.paused,
            queue,
            channels,
            files,
        });
    }
    for name in queues.keys() {
        survey.notes.push(format!(
            "disk queue {name} is not named by nsqd.dat (nsqd does not read it either); left"
        ));
    }
    Ok(survey)
}

fn count(
    dir: &Path,
    name: &str,
    files: Option<&QueueFiles>,
    survey: &mut Survey,
) -> Result<Count, ImportError> {
    let mut c = Count::default();
    if let Some(f) = files {
        let damage = read_queue(dir, name, f, &mut survey.notes, |m| {
            c.add(m.body.len());
            Ok(())
        })?;
        note_damage(survey, name, damage);
    }
    Ok(c)
}

fn note_damage(survey: &mut Survey, name: &str, damage: Damage) {
    if damage.records > 0 {
        survey.notes.push(format!(
            "disk queue {name}: {} damaged records ({} bytes) skipped",
            damage.records, damage.bytes
        ));
        survey.damage.records += damage.records;
        survey.damage.bytes += damage.bytes;
    }
}

/// Reads one queue from where nsqd's consumer stands (`notes`: a queue read whole).
fn read_queue(
    dir: &Path,
    name: &str,
    files: &QueueFiles,
    notes: &mut Vec<String>,
    each: impl FnMut(diskqueue::NsqdMessage<'_>) -> std::io::Result<()>,
) -> Result<Damage, ImportError> {
    let start = diskqueue::start_of(files);
    if let Start::Whole { why } = &start {
        let note = format!("disk queue {name}: {why}; read whole from its first file");
        if !notes.contains(&note) {
            notes.push(note);
        }
    }
    diskqueue::read(files, &start, each).map_err(|source| ImportError::Read {
        path: dir.join(format!("{name}.diskqueue.*.dat")),
        source,
    })
}

/// Builds the import of `survey` under `data_path`'s staging area and marks it complete.
/// Refuses first (nothing written) a topic the data path holds, or too little space.
pub fn stage(
    survey: &Survey,
    data_path: &Path,
    max_bytes_per_file: u64,
    fingerprint: String,
) -> Result<PathBuf, ImportError> {
    let staging = data_path.join(STAGING);
    if staging.join(STAGED).exists() {
        return Err(ImportError::AlreadyStaged { dir: staging });
    }
    check_room(survey, data_path, max_bytes_per_file)?;
    if staging.exists() {
        // A build a crash interrupted: start over.
        std::fs::remove_dir_all(&staging).map_err(|source| ImportError::Write {
            path: staging.clone(),
            source,
        })?;
    }
    let mut notes = Vec::new();
    for t in &survey.topics {
        stage_topic(
            &survey.dir,
            t,
            &crate::storage::topic_dir(&staging, &t.name),
            max_bytes_per_file,
            &mut notes,
        )?;
    }
    std::fs::create_dir_all(&staging).map_err(|source| ImportError::Write {
        path: staging.clone(),
        source,
    })?;
    let total = survey.total();
    let entry = marker::Entry {
        source: survey.dir.display().to_string(),
        fingerprint,
        nsqd_version: survey.version.clone(),
        imported_at: crate::civil_time::format(crate::ids::now_nanos()),
        topics: survey.topics.len() as u64,
        channels: survey.channels(),
        messages: total.messages,
        bytes: total.bytes,
        damaged_records: survey.damage.records,
    };
    crate::storage::sync_dir(&staging)?;
    marker::write_file(
        &staging.join(STAGED),
        &marker::Marker {
            imports: vec![entry],
        },
    )?;
    Ok(staging)
}

/// Refuses the import when a topic exists in the data path or the space is short.
fn check_room(
    survey: &Survey,
    data_path: &Path,
    max_bytes_per_file: u64,
) -> Result<(), ImportError> {
    for t in &survey.topics {
        let dir = crate::storage::topic_dir(data_path, &t.name);
        if dir.exists() {
            return Err(ImportError::TopicExists {
                topic: t.name.clone(),
                dir,
            });
        }
    }
    let needed = survey.bytes_needed(max_bytes_per_file);
    if let Some(free) = free_bytes(data_path) {
        if free < needed {
            return Err(ImportError::NoSpace {
                dir: data_path.to_path_buf(),
                needed,
                free,
            });
        }
    }
    Ok(())
}

fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path and `st` a buffer of the struct's size.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs filled it (rc 0).
    let st = unsafe { st.assume_init() };
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Writes one topic in the layout of `layout.rs`: owed messages, each channel's own, the
/// topic queue.
fn stage_topic(
    dir: &Path,
    t: &TopicSurvey,
    to: &Path,
    max_bytes_per_file: u64,
    notes: &mut Vec<String>,
) -> Result<(), ImportError> {
    let mut w = SegmentWriter::new(to, max_bytes_per_file)?;
    let mut plans: Vec<ChannelPlan> = t
        .channels
        .iter()
        .map(|c| ChannelPlan {
            name: c.name.clone(),
            paused: c.paused,
            ..Default::default()
        })
        .collect();
    // Each pass reads the queue again (nothing is held in memory): the result of a `Write`
    // error is carried out of the reader's callback.
    let mut failed: Option<ImportError> = None;
    for (c, plan) in t.channels.iter().zip(plans.iter_mut()) {
        let Some(files) = &c.queue else { continue };
        let name = format!("{}:{}", t.name, c.name);
        read_queue(dir, &name, files, notes, |m| {
            if m.attempts > 0 && failed.is_none() {
                match w.append(&m) {
                    Ok(seq) => plan.owed.push((seq, m.attempts)),
                    Err(e) => failed = Some(e),
                }
            }
            Ok(())
        })?;
    }
    for (c, plan) in t.channels.iter().zip(plans.iter_mut()) {
        let from = w.next_seq();
        if let Some(files) = &c.queue {
            let name = format!("{}:{}", t.name, c.name);
            read_queue(dir, &name, files, notes, |m| {
                if m.attempts == 0 && failed.is_none() {
                    if let Err(e) = w.append(&m) {
                        failed = Some(e);
                    }
                }
                Ok(())
            })?;
        }
        plan.own = (from, w.next_seq());
    }
    let topic_from = w.next_seq();
    if let Some(files) = &t.files {
        read_queue(dir, &t.name, files, notes, |m| {
            if failed.is_none() {
                if let Err(e) = w.append(&m) {
                    failed = Some(e);
                }
            }
            Ok(())
        })?;
    }
    if let Some(e) = failed {
        return Err(e);
    }
    w.finish(&layout::topic_meta(t.paused, &plans, topic_from))
}

/// Moves a complete staging area's topics into the data path and records the import; removes
/// an incomplete one. Returns what was committed.
pub fn commit(data_path: &Path) -> Result<Option<marker::Entry>, ImportError> {
    let staging = data_path.join(STAGING);
    if !staging.exists() {
        return Ok(None);
    }
    let staged = staging.join(STAGED);
    if !staged.exists() {
        warn!(dir = %staging.display(), "removing an nsqd import that was not complete");
        std::fs::remove_dir_all(&staging).map_err(|source| ImportError::Write {
            path: staging.clone(),
            source,
        })?;
        return Ok(None);
    }
    let done = marker::read_file(&staged)?;
    let entries = std::fs::read_dir(&staging).map_err(|source| ImportError::Read {
        path: staging.clone(),
        source,
    })?;
    let mut dirs: BTreeMap<String, PathBuf> = BTreeMap::new();
    for e in entries.filter_map(|e| e.ok()) {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            dirs.insert(e.file_name().to_string_lossy().into_owned(), e.path());
        }
    }
    // Every target checked before the first move: a topic created meanwhile refuses all.
    for name in dirs.keys() {
        let target = data_path.join(name);
        if target.exists() {
            return Err(ImportError::TopicExists {
                topic: crate::storage::topic_of_dir(name).unwrap_or_else(|| name.clone()),
                dir: target,
            });
        }
    }
    for (name, from) in &dirs {
        let target = data_path.join(name);
        std::fs::rename(from, &target).map_err(|source| ImportError::Write {
            path: target.clone(),
            source,
        })?;
    }
    crate::storage::sync_dir(data_path)?;
    let mut record = marker::read(data_path)?;
    record.imports.extend(done.imports.iter().cloned());
    marker::write_file(&data_path.join(marker::MARKER_FILE), &record)?;
    std::fs::remove_dir_all(&staging).map_err(|source| ImportError::Write {
        path: staging.clone(),
        source,
    })?;
    crate::storage::sync_dir(data_path)?;
    Ok(done.imports.into_iter().next())
}

/// The source's name in the import record: absolute where it can be made so.
fn source_name(dir: &Path) -> String {
    std::fs::canonicalize(dir)
        .unwrap_or_else(|_| dir.to_path_buf())
        .display()
        .to_string()
}

/// At start-up, before any shard opens a topic: finishes a staged import, then imports the
/// data path itself when it is an nsqd data directory not imported yet.
pub fn at_startup(data_path: &Path, max_bytes_per_file: u64) -> Result<(), ImportError> {
    if let Some(e) = commit(data_path)? {
        info!(
            source = %e.source,
            "imported nsqd {} data staged earlier: {} topics, {} channels, {} messages, {} bytes, {} damaged records skipped",
            e.nsqd_version, e.topics, e.channels, e.messages, e.bytes, e.damaged_records
        );
    }
    if !data_path.join(nsqd_meta::NSQD_DAT).exists() {
        if let Some(file) = nsqd_meta::pre_v1_file(data_path) {
            return Err(ImportError::PreV1 {
                dir: data_path.to_path_buf(),
                file,
            });
        }
        let queues = diskqueue::list(data_path).unwrap_or_default();
        if !queues.is_empty() {
            warn!(
                data_path = %data_path.display(),
                queues = queues.len(),
                "nsqd disk queues without nsqd.dat: not imported (nsqd would not read them either)"
            );
        }
        return Ok(());
    }
    let source = source_name(data_path);
    let fingerprint = marker::fingerprint(data_path)?;
    let record = marker::read(data_path)?;
    if let Some(e) = record.has(&fingerprint) {
        tracing::debug!(imported_at = %e.imported_at, "nsqd data already imported");
        return Ok(());
    }
    let mut survey = survey(data_path)?;
    survey.dir = PathBuf::from(&source);
    stage(&survey, data_path, max_bytes_per_file, fingerprint)?;
    commit(data_path)?;
    log_import(&survey);
    Ok(())
}

fn log_import(survey: &Survey) {
    for note in &survey.notes {
        warn!("nsqd import: {note}");
    }
    for line in survey.details() {
        info!("nsqd import: {}", line.trim_start());
    }
    info!("imported {}", survey.summary());
}

#[cfg(test)]
mod import_tests;
