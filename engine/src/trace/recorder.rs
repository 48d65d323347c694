//! One role's timeline recorder: nothing, every event in memory, or every event streamed to the
//! role's file as it happens; in `sampled` mode, only the events of the sampled clocks.

use super::chrome::ChromeWriter;
use super::sample::{message_clock, Sampling, EVENTS_PER_CLOCK};
use super::TraceMode;
use crate::error::{EngineError, Result};
use crate::ids::{Clock, RoleId};
use crate::message::Message;
use crate::metrics::TraceEvent;
use crate::output::FolderGate;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Bytes of a role's streamed timeline held before they are appended to its file: bounds a
/// streaming role's memory (and keeps few files open: one at a time, only while appending).
const STREAM_BUFFER: usize = 32 << 10;

/// How the roles of one run record their timelines: the mode, where streamed files go (none:
/// kept in memory for the caller) and the sample.
#[derive(Clone, Debug)]
pub struct TracePlan {
    mode: TraceMode,
    dir: Option<PathBuf>,
    sampling: Arc<Sampling>,
    /// The first clock the roles run: files of a stretch that continues from a checkpoint are
    /// named after it, so the earlier stretches' files stay.
    first_clock: u64,
    /// The run folder's door: streamed files are started and closed through it.
    gate: FolderGate,
}

impl TracePlan {
    /// A plan in `mode`, streaming to `dir` when given, sampling with `sampling`.
    pub fn new(mode: TraceMode, dir: Option<&Path>, sampling: Sampling) -> TracePlan {
        TracePlan {
            mode,
            dir: dir.map(Path::to_path_buf),
            sampling: Arc::new(sampling),
            first_clock: 0,
            gate: FolderGate::default(),
        }
    }

    /// The same plan starting and closing its streamed files through `gate`, so that once the
    /// gate shuts no role starts or completes a file in the folder.
    pub fn through(mut self, gate: FolderGate) -> TracePlan {
        self.gate = gate;
        self
    }

    /// The same plan for roles that continue a run from clock `clock` (a checkpoint): their files
    /// are `<role>.from-<clock>.json`.
    pub fn continuing_from(mut self, clock: u64) -> TracePlan {
        self.first_clock = clock;
        self
    }

    /// The recorder of `role`; when streaming, its file (`<dir>/<role>.json`, written as
    /// `<role>.tmp` until the role finishes) is created now.
    pub fn recorder(&self, role: RoleId) -> Result<Recorder> {
        let filter = match self.mode {
            TraceMode::Off => return Ok(Recorder::off()),
            TraceMode::Sampled if !self.sampling.traces(role) => return Ok(Recorder::off()),
            TraceMode::Sampled => Some(ClockFilter::new(self.sampling.clone())),
            TraceMode::Full => None,
        };
        let sink = match &self.dir {
            None => Sink::Memory(Vec::new()),
            Some(dir) => Sink::Stream(Stream::create(dir, role, self.first_clock, &self.gate)?),
        };
        Ok(Recorder {
            sink,
            filter,
            error: None,
        })
    }
}

/// One role's timeline as it is recorded.
pub struct Recorder {
    sink: Sink,
    filter: Option<ClockFilter>,
    /// The first failure to write the stream; recording stops there and [`Recorder::finish`]
    /// reports it.
    error: Option<EngineError>,
}

impl Default for Recorder {
    /// Every event, in memory.
    fn default() -> Recorder {
        Recorder {
            sink: Sink::Memory(Vec::new()),
            filter: None,
            error: None,
        }
    }
}

impl Recorder {
    /// A recorder that keeps nothing.
    pub fn off() -> Recorder {
        Recorder {
            sink: Sink::Off,
            filter: None,
            error: None,
        }
    }

    /// Records the span `[start_s, end_s]` named `name` of kind `category`, if the mode keeps it.
    pub fn record(&mut self, name: &str, category: &str, start_s: f64, end_s: f64) {
        if matches!(self.sink, Sink::Off) {
            return;
        }
        if let Some(filter) = &mut self.filter {
            if !filter.admit() {
                return;
            }
        }
        match &mut self.sink {
            Sink::Off => {}
            Sink::Memory(events) => events.push(TraceEvent {
                name: name.to_string(),
                category: category.to_string(),
                start_s,
                end_s,
            }),
            Sink::Stream(stream) => {
                if let Err(source) = stream.writer.event(name, category, start_s, end_s) {
                    self.error = Some(stream.error(source));
                    self.sink = Sink::Off;
                }
            }
        }
    }

    /// The role now works on `clock` (its own clock, which messages no longer override).
    pub fn set_clock(&mut self, clock: Clock) {
        if let Some(filter) = &mut self.filter {
            filter.own_clock = true;
            filter.move_to(clock);
        }
    }

    /// The role received `msg`: a role without a clock of its own follows the highest clock its
    /// messages carry.
    pub fn saw(&mut self, msg: &Message) {
        if let Some(filter) = &mut self.filter {
            if filter.own_clock {
                return;
            }
            if let Some(clock) = message_clock(msg) {
                if clock > filter.clock {
                    filter.move_to(clock);
                }
            }
        }
    }

    /// Ends the timeline: the events when they were kept in memory, `None` when there is no
    /// timeline to hand over (off, not sampled, or already streamed to its file, now closed).
    pub fn finish(self) -> Result<Option<Vec<TraceEvent>>> {
        if let Some(e) = self.error {
            return Err(e);
        }
        match self.sink {
            Sink::Off => Ok(None),
            Sink::Memory(events) => Ok(Some(events)),
            Sink::Stream(stream) => stream.close().map(|()| None),
        }
    }
}

/// Where kept events go.
enum Sink {
    Off,
    Memory(Vec<TraceEvent>),
    Stream(Stream),
}

/// The file name of `role`'s timeline of a stretch of clocks starting at `first_clock`:
/// `<role>.json` from the start, `<role>.from-<clock>.json` for a stretch that continues from a
/// checkpoint.
pub fn timeline_file(role: RoleId, first_clock: u64) -> String {
    match first_clock {
        0 => format!("{}.json", role.label()),
        clock => format!("{}.from-{clock}.json", role.label()),
    }
}

/// A role's timeline streamed to its file.
struct Stream {
    writer: ChromeWriter<BufWriter<AppendFile>>,
    /// Where it is written while the role runs.
    tmp: PathBuf,
    /// Where it lands once the role is done.
    path: PathBuf,
    /// The run folder's door, which the move to `path` goes through.
    gate: FolderGate,
}

impl Stream {
    /// Starts `<dir>/<role>.json` (as `<role>.tmp` until closed), or `<role>.from-<clock>.json`
    /// for roles that continue from a checkpoint at `first_clock`, through `gate`.
    fn create(dir: &Path, role: RoleId, first_clock: u64, gate: &FolderGate) -> Result<Stream> {
        let label = role.label();
        let path = dir.join(timeline_file(role, first_clock));
        let tmp = path.with_extension("tmp");
        let io = |source| EngineError::Io {
            path: tmp.display().to_string(),
            source,
        };
        gate.write(&tmp, || {
            std::fs::create_dir_all(dir).map_err(io)?;
            File::create(&tmp).map(drop).map_err(io)
        })?;
        // Appends open the file without creating it: once a clean-up has removed it, they fail.
        let file = AppendFile { path: tmp.clone() };
        let writer = ChromeWriter::begin(BufWriter::with_capacity(STREAM_BUFFER, file), &label)
            .map_err(io)?;
        Ok(Stream {
            writer,
            tmp,
            path,
            gate: gate.clone(),
        })
    }

    fn error(&self, source: io::Error) -> EngineError {
        EngineError::Io {
            path: self.tmp.display().to_string(),
            source,
        }
    }

    /// Ends the document and moves it to its final name.
    fn close(self) -> Result<()> {
        let Stream {
            writer,
            tmp,
            path,
            gate,
        } = self;
        let io = |source| EngineError::Io {
            path: tmp.display().to_string(),
            source,
        };
        writer.finish().map_err(io)?;
        gate.write(&path, || std::fs::rename(&tmp, &path).map_err(io))
    }
}

/// A file opened for each write and closed after it, so thousands of roles can stream at once
/// without thousands of open files.
struct AppendFile {
    path: PathBuf,
}

impl Write for AppendFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        OpenOptions::new()
            .append(true)
            .open(&self.path)?
            .write_all(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The sampled mode's filter: which clock the role is on, and how many events of each sampled
/// clock it has kept.
struct ClockFilter {
    sampling: Arc<Sampling>,
    clock: Clock,
    own_clock: bool,
    window: Option<usize>,
    kept: Vec<usize>,
}

impl ClockFilter {
    fn new(sampling: Arc<Sampling>) -> ClockFilter {
        let kept = vec![0; sampling.clocks().len()];
        let window = sampling.window(0);
        ClockFilter {
            sampling,
            clock: 0,
            own_clock: false,
            window,
            kept,
        }
    }

    fn move_to(&mut self, clock: Clock) {
        if clock != self.clock {
            self.clock = clock;
            self.window = self.sampling.window(clock);
        }
    }

    /// Whether the next event is kept (and counts it when it is).
    fn admit(&mut self) -> bool {
        let Some(w) = self.window else {
            return false;
        };
        if self.kept[w] >= EVENTS_PER_CLOCK {
            return false;
        }
        self.kept[w] += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampled(dir: Option<&Path>, role: RoleId) -> Recorder {
        TracePlan::new(TraceMode::Sampled, dir, Sampling::new(16, 8, 100))
            .recorder(role)
            .unwrap()
    }

    #[test]
    fn off_and_unsampled_roles_keep_nothing() {
        let mut off = TracePlan::new(TraceMode::Off, None, Sampling::new(16, 8, 100))
            .recorder(RoleId::Worker(0))
            .unwrap();
        off.record("compute", "compute", 0.0, 1.0);
        assert_eq!(off.finish().unwrap(), None);
        let mut skipped = sampled(None, RoleId::Worker(1));
        skipped.record("compute", "compute", 0.0, 1.0);
        assert_eq!(skipped.finish().unwrap(), None);
    }

    #[test]
    fn sampled_roles_keep_the_first_events_of_sampled_clocks_only() {
        // 100 clocks: sampled at 0, 14, 28, ..., 99.
        let mut r = sampled(None, RoleId::Worker(15));
        for clock in 0..100 {
            r.set_clock(clock);
            for _ in 0..EVENTS_PER_CLOCK + 10 {
                r.record("c", "compute", clock as f64, clock as f64 + 1.0);
            }
        }
        let events = r.finish().unwrap().unwrap();
        assert_eq!(events.len(), 8 * EVENTS_PER_CLOCK);
        let clocks: std::collections::BTreeSet<u64> =
            events.iter().map(|e| e.start_s as u64).collect();
        assert_eq!(
            clocks.into_iter().collect::<Vec<_>>(),
            vec![0, 14, 28, 42, 56, 70, 84, 99]
        );
    }

    #[test]
    fn a_role_without_a_clock_follows_its_messages() {
        let mut r = sampled(None, RoleId::Server(7));
        let pull = |clock| Message::Pull {
            clock,
            min_version: None,
        };
        r.record("serve", "serve", 0.0, 0.1); // clock 0: kept
        r.saw(&pull(5));
        r.record("serve", "serve", 5.0, 5.1); // clock 5: not sampled
        r.saw(&pull(14));
        r.saw(&pull(3)); // an older clock does not move it back
        r.record("serve", "serve", 14.0, 14.1); // kept
        let events = r.finish().unwrap().unwrap();
        let starts: Vec<f64> = events.iter().map(|e| e.start_s).collect();
        assert_eq!(starts, vec![0.0, 14.0]);
    }

    #[test]
    fn a_stream_that_cannot_be_written_is_an_error_naming_the_file() {
        let dir = std::env::temp_dir().join(format!("concord-trace-{}", std::process::id()));
        let mut r = sampled(Some(&dir), RoleId::Coordinator);
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::create_dir_all(dir.join("coordinator.tmp")).unwrap(); // a folder in its way
        for _ in 0..EVENTS_PER_CLOCK {
            r.record(
                "a fairly long span name to fill the buffer",
                "compute",
                0.0,
                1.0,
            );
        }
        let e = r.finish().unwrap_err().to_string();
        assert!(e.contains("coordinator.tmp"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn once_the_gate_shuts_no_timeline_is_started_or_completed() {
        let dir = tempfile::tempdir().unwrap();
        let gate = FolderGate::default();
        let plan = TracePlan::new(TraceMode::Full, Some(dir.path()), Sampling::new(2, 1, 10))
            .through(gate.clone());
        let mut started = plan.recorder(RoleId::Worker(0)).unwrap();
        started.record("compute", "compute", 0.0, 1.0);
        // What a clean-up does: shut the gate, then remove the half-written timelines.
        gate.shut();
        std::fs::remove_file(dir.path().join("worker-0.tmp")).unwrap();
        let late = plan
            .recorder(RoleId::Worker(1))
            .err()
            .map(|e| e.to_string());
        assert!(late.is_some_and(|e| e.contains("worker-1.tmp")));
        let closing = started.finish().unwrap_err().to_string();
        assert!(closing.contains("worker-0"), "{closing}");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
