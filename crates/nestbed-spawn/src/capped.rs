//! How much of a program's output stream is kept: the first `limit` bytes; the rest is
//! counted and said in one line at the end, so a program printing gigabytes cannot fill the
//! disk of the results folder.

/// One stream's account of kept and dropped bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capped {
    limit: u64,
    kept: u64,
    dropped: u64,
}

impl Capped {
    /// A stream that keeps at most `limit` bytes.
    pub fn new(limit: u64) -> Self {
        Capped {
            limit,
            kept: 0,
            dropped: 0,
        }
    }

    /// Of the next `n` bytes of the stream, how many (the first ones) are kept; the rest are
    /// counted as dropped.
    pub fn take(&mut self, n: usize) -> usize {
        let keep = (self.limit - self.kept).min(n as u64);
        self.kept += keep;
        self.dropped += n as u64 - keep;
        keep as usize
    }

    /// The line that ends the file when anything was dropped.
    ///
    /// ```
    /// let mut out = nestbed_spawn::capped::Capped::new(4);
    /// assert_eq!(out.take(6), 4);
    /// assert_eq!(out.note().unwrap(), "\n[nestbed: 2 more bytes of output were dropped]\n");
    /// ```
    pub fn note(&self) -> Option<String> {
        (self.dropped > 0).then(|| {
            format!(
                "\n[nestbed: {} more bytes of output were dropped]\n",
                self.dropped
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_within_the_limit_is_kept_whole_and_says_nothing() {
        let mut out = Capped::new(10);
        assert_eq!(out.take(4), 4);
        assert_eq!(out.take(6), 6);
        assert_eq!(out.note(), None);
    }

    #[test]
    fn the_chunk_that_crosses_the_limit_is_cut_and_later_ones_dropped_whole() {
        let mut out = Capped::new(10);
        assert_eq!(out.take(8), 8);
        assert_eq!(out.take(5), 2);
        assert_eq!(out.take(7), 0);
        assert_eq!(
            out.note().unwrap(),
            "\n[nestbed: 10 more bytes of output were dropped]\n"
        );
    }
}
