//! The Chrome trace format (open in Perfetto or chrome://tracing), written one event at a time.

use crate::error::{EngineError, Result};
use crate::metrics::TraceEvent;
use serde::Serialize;
use std::io::{self, BufWriter, Write};
use std::path::Path;

/// One complete ("X") event as the Chrome trace format has it: times in microseconds.
#[derive(Serialize)]
struct ChromeEvent<'a> {
    name: &'a str,
    cat: &'a str,
    ph: &'static str,
    pid: u32,
    tid: &'a str,
    ts: f64,
    dur: f64,
}

/// Writes one role's Chrome trace document, `{"displayTimeUnit":"ms","traceEvents":[…]}`, to
/// `out` event by event, so a timeline never has to be held whole in memory.
pub struct ChromeWriter<W: Write> {
    out: W,
    role: String,
    events: u64,
}

impl<W: Write> ChromeWriter<W> {
    /// Starts the document of `role`'s timeline on `out`.
    pub fn begin(mut out: W, role: &str) -> io::Result<ChromeWriter<W>> {
        out.write_all(br#"{"displayTimeUnit":"ms","traceEvents":["#)?;
        Ok(ChromeWriter {
            out,
            role: role.to_string(),
            events: 0,
        })
    }

    /// Appends the span `[start_s, end_s]` (run seconds) named `name` of kind `category`.
    pub fn event(
        &mut self,
        name: &str,
        category: &str,
        start_s: f64,
        end_s: f64,
    ) -> io::Result<()> {
        if self.events > 0 {
            self.out.write_all(b",")?;
        }
        let event = ChromeEvent {
            name,
            cat: category,
            ph: "X",
            pid: 1,
            tid: &self.role,
            ts: start_s * 1e6,
            dur: (end_s - start_s).max(0.0) * 1e6,
        };
        serde_json::to_writer(&mut self.out, &event).map_err(io::Error::from)?;
        self.events += 1;
        Ok(())
    }

    /// Events written so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Closes the document and hands back the writer, flushed.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.write_all(b"]}")?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Writes a Chrome trace of one role's timeline held in memory, atomically: a temporary sibling,
/// then a rename.
pub fn write_chrome_trace(path: &Path, role: &str, events: &[TraceEvent]) -> Result<()> {
    let io = |source| EngineError::Io {
        path: path.display().to_string(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let tmp = path.with_extension("tmp");
    let file = std::fs::File::create(&tmp).map_err(io)?;
    let mut writer = ChromeWriter::begin(BufWriter::new(file), role).map_err(io)?;
    for e in events {
        writer
            .event(&e.name, &e.category, e.start_s, e.end_s)
            .map_err(io)?;
    }
    writer.finish().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_is_valid_json_with_every_event_in_order() {
        let mut w = ChromeWriter::begin(Vec::new(), "worker-3").unwrap();
        w.event("compute", "compute", 0.5, 1.5).unwrap();
        w.event("wait", "wait", 2.0, 1.0).unwrap();
        assert_eq!(w.events(), 2);
        let bytes = w.finish().unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(doc["displayTimeUnit"], "ms");
        let events = doc["traceEvents"].as_array().unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0]["name"], "compute");
        assert_eq!(events[0]["tid"], "worker-3");
        assert_eq!(events[0]["ph"], "X");
        assert_eq!(events[0]["ts"].as_f64(), Some(0.5e6));
        assert_eq!(events[0]["dur"].as_f64(), Some(1e6));
        assert_eq!(events[1]["cat"], "wait");
        assert_eq!(
            events[1]["dur"].as_f64(),
            Some(0.0),
            "negative spans clamp to 0"
        );
    }

    #[test]
    fn an_empty_timeline_is_an_empty_event_list() {
        let bytes = ChromeWriter::begin(Vec::new(), "coordinator")
            .unwrap()
            .finish()
            .unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(doc["traceEvents"].as_array().map(Vec::len), Some(0));
    }
}
