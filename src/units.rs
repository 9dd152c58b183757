//! Unit suffixes. A quantity with a physical dimension must carry its unit and the unit must be
//! of that dimension: mpipec never guesses whether `64` meant GiB or GB.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dimension {
    Bytes,
    Bandwidth,
    Time,
    FlopRate,
    Flops,
}

impl fmt::Display for Dimension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dimension::Bytes => "a size in bytes",
            Dimension::Bandwidth => "a bandwidth",
            Dimension::Time => "a time",
            Dimension::FlopRate => "a FLOP rate",
            Dimension::Flops => "a FLOP count",
        })
    }
}

impl Dimension {
    /// Units of this dimension, for help texts.
    pub fn examples(self) -> &'static str {
        match self {
            Dimension::Bytes => "`B`, `MB`, `GB`, `GiB`",
            Dimension::Bandwidth => "`GB/s`, `TB/s`, `Gbit/s`",
            Dimension::Time => "`ns`, `us`, `ms`, `s`",
            Dimension::FlopRate => "`TFLOP/s`, `PFLOP/s`",
            Dimension::Flops => "`GFLOP`, `TFLOP`",
        }
    }
}

/// Every unit suffix: its dimension and its factor to the base unit (bytes, bytes per
/// second, seconds, FLOP per second, FLOP).
pub const UNITS: &[(&str, Dimension, f64)] = &[
    ("B", Dimension::Bytes, 1.0),
    ("KB", Dimension::Bytes, 1e3),
    ("MB", Dimension::Bytes, 1e6),
    ("GB", Dimension::Bytes, 1e9),
    ("TB", Dimension::Bytes, 1e12),
    ("KiB", Dimension::Bytes, 1024.0),
    ("MiB", Dimension::Bytes, 1048576.0),
    ("GiB", Dimension::Bytes, 1073741824.0),
    ("TiB", Dimension::Bytes, 1099511627776.0),
    ("B/s", Dimension::Bandwidth, 1.0),
    ("KB/s", Dimension::Bandwidth, 1e3),
    ("MB/s", Dimension::Bandwidth, 1e6),
    ("GB/s", Dimension::Bandwidth, 1e9),
    ("TB/s", Dimension::Bandwidth, 1e12),
    ("GiB/s", Dimension::Bandwidth, 1073741824.0),
    ("TiB/s", Dimension::Bandwidth, 1099511627776.0),
    ("Gbit/s", Dimension::Bandwidth, 1e9 / 8.0),
    ("Tbit/s", Dimension::Bandwidth, 1e12 / 8.0),
    ("ns", Dimension::Time, 1e-9),
    ("us", Dimension::Time, 1e-6),
    ("ms", Dimension::Time, 1e-3),
    ("s", Dimension::Time, 1.0),
    ("GFLOP/s", Dimension::FlopRate, 1e9),
    ("TFLOP/s", Dimension::FlopRate, 1e12),
    ("PFLOP/s", Dimension::FlopRate, 1e15),
    ("FLOP", Dimension::Flops, 1.0),
    ("GFLOP", Dimension::Flops, 1e9),
    ("TFLOP", Dimension::Flops, 1e12),
    ("PFLOP", Dimension::Flops, 1e15),
];

/// A magnitude suffix people write after counts (`8k`, `2M`, `4Ki`), which mpipec does not
/// read because `k` is 1000 to some and 1024 to others: its decimal and binary factors, so a
/// diagnostic can offer both readings.
pub fn magnitude(suffix: &str) -> Option<(f64, f64)> {
    let (decimal, binary) = match suffix {
        "k" | "K" => (1e3, 1024.0),
        "m" | "M" => (1e6, 1048576.0),
        "g" | "G" => (1e9, 1073741824.0),
        "Ki" => (1024.0, 1024.0),
        "Mi" => (1048576.0, 1048576.0),
        "Gi" => (1073741824.0, 1073741824.0),
        _ => return None,
    };
    Some((decimal, binary))
}

pub fn lookup(unit: &str) -> Option<(Dimension, f64)> {
    UNITS.iter().find(|(u, _, _)| *u == unit).map(|(_, d, f)| (*d, *f))
}
