//! Tests of the bench, by topic: suite parsing and errors, sweep expansion, determinism of a
//! real cell, measurements, claims and trends, and that the report's plots are valid SVG with
//! titles, axis labels and legends.

mod common;
mod measure;
mod report;
mod runner;
mod suite;
mod verdicts;
