//! Compressed GraphQL answers: gzip or br, as the client's `Accept-Encoding` prefers, for
//! bodies of at least [`MIN_BYTES`].
//!
//! A page of 50 remarks is some 11 KB of JSON and a tenth of that compressed; a
//! `likeRemark`'s answer is a few hundred bytes, which compression would not shrink by
//! a packet. So the GraphQL handler, which holds the whole serialised body anyway, compresses
//! it in place ([`compress`]): a small body costs one length comparison and `Accept-Encoding`
//! is not even read. Rejected: tower-http's `CompressionLayer` on the `/graphql` route
//! (as the pages of `pages.rs` use it), which would clone the layer, read the header and wrap
//! the body in a streaming encoder's type for every request, small or not; the same
//! per-request cost that `edge` avoids by not stacking tower layers (see its module doc).
//!
//! br is preferred when the client offers both equally (a page of 50 remarks, 16 KB of
//! JSON, is 1.3 KB gzip and 1.1 KB br). The levels are the fast ones, since every answer is
//! compressed anew: gzip 5 and br 4. br costs several times gzip's CPU (measured on a 13 KB
//! page with the dependencies of a debug build, on a busy machine: some 0.05 to 0.3 ms for
//! gzip, 0.6 to 1 ms for br); higher br levels cost more for a few per cent. Bodies larger than
//! [`BLOCKING_BYTES`] are compressed on the blocking pool, so that one large answer does not
//! hold a worker thread that other requests wait for.

use std::io::Write;

use axum::http::{header, HeaderMap, HeaderValue};

/// Bodies shorter than this go as they are: under a packet or two, compression saves no
/// round trip and costs CPU on both ends.
pub(crate) const MIN_BYTES: usize = 1024;

/// Bodies at least this long are compressed off the async workers.
const BLOCKING_BYTES: usize = 64 * 1024;

const GZIP_LEVEL: u32 = 5;
const BROTLI_QUALITY: i32 = 4;
/// Brotli's window (log2 bytes), 256 KiB: more than nearly every answer; its buffers are
/// allocated for each body compressed, so not the largest (16 MiB).
const BROTLI_WINDOW: i32 = 18;

/// A coding a response may be sent in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coding {
    Brotli,
    Gzip,
}

impl Coding {
    fn header(self) -> HeaderValue {
        HeaderValue::from_static(match self {
            Self::Brotli => "br",
            Self::Gzip => "gzip",
        })
    }
}

/// The coding the client prefers among ours, by `Accept-Encoding` (RFC 9110 §12.5.3):
/// q-values weigh each coding, `*` stands for those it does not name, `q=0` refuses one, br
/// wins a tie, and an `identity` named with a higher q-value than both keeps the body as it
/// is. No header (or none we speak): `None`.
pub(crate) fn negotiate(headers: &HeaderMap) -> Option<Coding> {
    let mut br = None;
    let mut gzip = None;
    let mut identity = None;
    let mut any = None;
    for value in headers.get_all(header::ACCEPT_ENCODING) {
        let Ok(value) = value.to_str() else { continue };
        for entry in value.split(',') {
            let mut parts = entry.split(';');
            let coding = parts.next().unwrap_or("").trim();
            let q = parts
                .filter_map(|param| {
                    let (name, value) = param.split_once('=')?;
                    name.trim()
                        .eq_ignore_ascii_case("q")
                        .then(|| value.trim().parse::<f32>().ok())?
                })
                .next()
                .unwrap_or(1.0);
            let slot = if coding.eq_ignore_ascii_case("br") {
                &mut br
            } else if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
                &mut gzip
            } else if coding.eq_ignore_ascii_case("identity") {
                &mut identity
            } else if coding == "*" {
                &mut any
            } else {
                continue;
            };
            *slot = Some(q);
        }
    }
    let br = br.or(any).unwrap_or(0.0);
    let gzip = gzip.or(any).unwrap_or(0.0);
    let (coding, q) = if br >= gzip {
        (Coding::Brotli, br)
    } else {
        (Coding::Gzip, gzip)
    };
    (q > 0.0 && identity.is_none_or(|identity| q >= identity)).then_some(coding)
}

/// `body` in the coding the request asks for, with its `Content-Encoding`; the body as it
/// is when it is short or the client accepts no coding of ours.
pub(crate) async fn compress(request: &HeaderMap, body: Vec<u8>) -> (Vec<u8>, Option<HeaderValue>) {
    if body.len() < MIN_BYTES {
        return (body, None);
    }
    let Some(coding) = negotiate(request) else {
        return (body, None);
    };
    if body.len() < BLOCKING_BYTES {
        return match encode(coding, &body) {
            Some(encoded) => (encoded, Some(coding.header())),
            None => (body, None),
        };
    }
    let encoded = tokio::task::spawn_blocking(move || {
        let encoded = encode(coding, &body);
        (body, encoded)
    })
    .await;
    match encoded {
        Ok((_, Some(encoded))) => (encoded, Some(coding.header())),
        Ok((body, None)) => (body, None),
        // The closure cannot panic short of running out of memory, which aborts.
        Err(error) => std::panic::resume_unwind(error.into_panic()),
    }
}

fn encode(coding: Coding, body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(body.len() / 4);
    match coding {
        Coding::Gzip => {
            let mut encoder =
                flate2::write::GzEncoder::new(&mut out, flate2::Compression::new(GZIP_LEVEL));
            encoder.write_all(body).ok()?;
            encoder.finish().ok()?;
        }
        Coding::Brotli => {
            let params = brotli::enc::BrotliEncoderParams {
                quality: BROTLI_QUALITY,
                lgwin: BROTLI_WINDOW,
                size_hint: body.len(),
                ..Default::default()
            };
            brotli::BrotliCompress(&mut &body[..], &mut out, &params).ok()?;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepting(value: &'static str) -> Option<Coding> {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT_ENCODING, HeaderValue::from_static(value));
        negotiate(&headers)
    }

    #[test]
    fn the_client_s_preference_picks_the_coding_and_br_wins_a_tie() {
        assert_eq!(negotiate(&HeaderMap::new()), None);
        assert_eq!(accepting("gzip, deflate, br"), Some(Coding::Brotli));
        assert_eq!(accepting("gzip"), Some(Coding::Gzip));
        assert_eq!(accepting("br;q=0.5, gzip"), Some(Coding::Gzip));
        assert_eq!(accepting("br;q=0, gzip;q=0.1"), Some(Coding::Gzip));
        assert_eq!(accepting("*"), Some(Coding::Brotli));
        assert_eq!(accepting("*;q=0.5, br;q=0"), Some(Coding::Gzip));
        assert_eq!(accepting("identity"), None);
        assert_eq!(accepting("identity, gzip;q=0.5"), None);
        assert_eq!(accepting("deflate, zstd"), None);
        assert_eq!(accepting("gzip;q=0, br;q=0"), None);
        assert_eq!(accepting("GZIP ; Q=0.8"), Some(Coding::Gzip));
    }
}
