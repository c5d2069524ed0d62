//! Decoding of the chunked transfer coding (RFC 9112 §7.1) from a read buffer, without I/O.

use bytes::{Buf, Bytes, BytesMut};

/// Longest chunk-size line (size plus extensions) accepted.
const MAX_SIZE_LINE: usize = 4096;
/// Most trailer bytes accepted; trailers are read and dropped.
const MAX_TRAILERS: usize = 64 * 1024;

/// What one decoding step produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// Body bytes.
    Data(Bytes),
    /// The buffer holds no complete next item: read more.
    NeedMore,
    /// The last chunk and the trailers are consumed.
    End,
}

/// A malformed chunked body.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ChunkError {
    /// The size line is not hexadecimal, too long or overflows.
    #[error("invalid chunk size line")]
    Size,
    /// Chunk data not followed by CRLF.
    #[error("chunk data not followed by CRLF")]
    MissingCrlf,
    /// More trailer bytes than accepted.
    #[error("chunked trailers too large")]
    Trailers,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading hex digits of the size; `digits` counts them.
    Size { value: u64, digits: u8 },
    /// Skipping a chunk extension up to the line's CR.
    Extension { value: u64 },
    /// Expecting the LF of the size line.
    SizeLf { value: u64 },
    /// Inside chunk data.
    Data { left: u64 },
    /// Expecting CR after chunk data.
    DataCr,
    /// Expecting LF after chunk data.
    DataLf,
    /// At the start of a trailer line (an empty one ends the body).
    TrailerStart,
    /// Inside a trailer line.
    TrailerLine,
    /// Expecting the final LF.
    EndLf,
    /// Done.
    End,
}

/// Incremental decoder; feed it the connection's read buffer until it says `End`.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    line: usize,
    trailers: usize,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        ChunkedDecoder {
            state: State::Size {
                value: 0,
                digits: 0,
            },
            line: 0,
            trailers: 0,
        }
    }
}

impl ChunkedDecoder {
    /// Consumes framing bytes from `buf` and returns the next piece of body, if any.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, ChunkError> {
        loop {
            if let State::Data { left } = self.state {
                if buf.is_empty() {
                    return Ok(Decoded::NeedMore);
                }
                let n = (left.min(buf.len() as u64)) as usize;
                self.state = if n as u64 == left {
                    State::DataCr
                } else {
                    State::Data {
                        left: left - n as u64,
                    }
                };
                return Ok(Decoded::Data(buf.split_to(n).freeze()));
            }
            if self.state == State::End {
                return Ok(Decoded::End);
            }
            // Framing bytes: step through them up to the next data or the end.
            let mut used = 0;
            for &b in buf.iter() {
                used += 1;
                self.step(b)?;
                if matches!(self.state, State::Data { .. } | State::End) {
                    break;
                }
            }
            buf.advance(used);
            if !matches!(self.state, State::Data { .. } | State::End) {
                return Ok(Decoded::NeedMore);
            }
        }
    }

    /// Whether the whole body has been decoded.
    pub fn is_end(&self) -> bool {
        self.state == State::End
    }

    fn step(&mut self, b: u8) -> Result<(), ChunkError> {
        use State::*;
        if matches!(self.state, Size { .. } | Extension { .. } | SizeLf { .. }) {
            self.line += 1;
            if self.line > MAX_SIZE_LINE {
                return Err(ChunkError::Size);
            }
        }
        self.state = match self.state {
            Size { value, digits } => match (b as char).to_digit(16) {
                Some(d) if digits < 16 => Size {
                    value: value << 4 | d as u64,
                    digits: digits + 1,
                },
                Some(_) => return Err(ChunkError::Size),
                None if digits == 0 => return Err(ChunkError::Size),
                None => match b {
                    b'\r' => SizeLf { value },
                    b';' | b' ' | b'\t' => Extension { value },
                    _ => return Err(ChunkError::Size),
                },
            },
            Extension { value } => match b {
                b'\r' => SizeLf { value },
                b'\n' => return Err(ChunkError::Size),
                _ => Extension { value },
            },
            SizeLf { value } => match b {
                b'\n' => {
                    self.line = 0;
                    if value == 0 {
                        TrailerStart
                    } else {
                        Data { left: value }
                    }
                }
                _ => return Err(ChunkError::Size),
            },
            DataCr if b == b'\r' => DataLf,
            DataLf if b == b'\n' => Size {
                value: 0,
                digits: 0,
            },
            DataCr | DataLf => return Err(ChunkError::MissingCrlf),
            TrailerStart | TrailerLine => {
                self.trailers += 1;
                if self.trailers > MAX_TRAILERS {
                    return Err(ChunkError::Trailers);
                }
                match (self.state, b) {
                    (TrailerStart, b'\r') => EndLf,
                    // A bare LF ends the body as CRLF does (as it ends the trailer lines):
                    // waiting for more would hang the response until the read timeout.
                    (TrailerStart, b'\n') => End,
                    (_, b'\n') => TrailerStart,
                    _ => TrailerLine,
                }
            }
            EndLf if b == b'\n' => End,
            EndLf => return Err(ChunkError::MissingCrlf),
            Data { .. } | End => unreachable!("handled by decode"),
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `input` fed in pieces of `step` bytes; returns the body or the first error.
    fn decode_in_steps(input: &[u8], step: usize) -> Result<(Vec<u8>, BytesMut), ChunkError> {
        let mut d = ChunkedDecoder::default();
        let mut buf = BytesMut::new();
        let mut body = Vec::new();
        let mut fed = 0;
        loop {
            match d.decode(&mut buf)? {
                Decoded::Data(b) => body.extend_from_slice(&b),
                Decoded::End => return Ok((body, buf)),
                Decoded::NeedMore => {
                    assert!(fed < input.len(), "decoder wants more than the input has");
                    let end = (fed + step).min(input.len());
                    buf.extend_from_slice(&input[fed..end]);
                    fed = end;
                }
            }
        }
    }

    #[test]
    fn decodes_whatever_the_read_boundaries() {
        let input = b"5\r\nhello\r\nA;name=\"v\"\r\n0123456789\r\n0\r\nx-trailer: 1\r\n\r\nNEXT";
        for step in [1, 2, 3, 7, 64] {
            let (body, rest) = decode_in_steps(input, step).unwrap();
            assert_eq!(body, b"hello0123456789", "step {step}");
            // Bytes after the body stay for the connection to judge.
            let mut d = ChunkedDecoder::default();
            let mut all = BytesMut::from(&input[..]);
            while d.decode(&mut all).unwrap() != Decoded::End {}
            assert_eq!(&all[..], b"NEXT");
            assert!(rest.len() <= 4);
        }
    }

    #[test]
    fn empty_body_and_uppercase_hex() {
        assert_eq!(decode_in_steps(b"0\r\n\r\n", 64).unwrap().0, b"");
        let (body, _) =
            decode_in_steps(b"1F\r\n0123456789012345678901234567890\r\n0\r\n\r\n", 5).unwrap();
        assert_eq!(body.len(), 31);
    }

    #[test]
    fn a_bare_lf_after_the_last_chunk_ends_the_body_at_once() {
        for input in [
            &b"3\r\nabc\r\n0\r\n\n"[..],
            b"0\r\nx: y\n\n",
            b"0\r\nx: y\r\n\n",
        ] {
            for step in [1, 2, 64] {
                let (body, rest) = decode_in_steps(input, step).unwrap();
                assert!(rest.is_empty(), "{input:?}");
                assert!(body.is_empty() || body == b"abc");
            }
        }
    }

    #[test]
    fn malformed_input_is_an_error() {
        for (input, want) in [
            (&b"x\r\n"[..], ChunkError::Size),
            (b"\r\n", ChunkError::Size),
            (b"5\n", ChunkError::Size),
            (b"11111111111111111\r\n", ChunkError::Size),
            (b"3\r\nabcX", ChunkError::MissingCrlf),
            (b"3\r\nabc\rX", ChunkError::MissingCrlf),
            (b"0\r\n\rX", ChunkError::MissingCrlf),
        ] {
            assert_eq!(decode_in_steps(input, 64).unwrap_err(), want, "{input:?}");
        }
        let long_ext = format!("1;{}\r\n", "e".repeat(MAX_SIZE_LINE));
        assert_eq!(
            decode_in_steps(long_ext.as_bytes(), 64).unwrap_err(),
            ChunkError::Size
        );
        let long_trailers = format!("0\r\nx: {}\r\n\r\n", "t".repeat(MAX_TRAILERS));
        assert_eq!(
            decode_in_steps(long_trailers.as_bytes(), 4096).unwrap_err(),
            ChunkError::Trailers
        );
    }
}
