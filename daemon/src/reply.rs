//! What every route answers with besides its own body: the JSON error, and a file
//! streamed in chunks.
use actix_web::HttpResponse;
use bytes::Bytes;
use futures_util::stream;
use yued_protocol::ErrorBody;

/// A JSON error (`{"error": "..."}`) with its status.
pub fn error(status: actix_web::http::StatusCode, msg: impl Into<String>) -> HttpResponse {
    HttpResponse::build(status).json(ErrorBody { error: msg.into() })
}

/// A file as 256 KiB chunks.
pub fn file_chunks(path: std::path::PathBuf) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> {
    use std::io::Read;
    stream::unfold(None::<std::fs::File>, move |f| {
        let path = path.clone();
        async move {
            let mut f = match f {
                Some(f) => f,
                None => match std::fs::File::open(&path) {
                    Ok(f) => f,
                    Err(e) => return Some((Err(e), None)),
                },
            };
            let mut buf = vec![0u8; 256 * 1024];
            match f.read(&mut buf) {
                Ok(0) => None,
                Ok(n) => {
                    buf.truncate(n);
                    Some((Ok(Bytes::from(buf)), Some(f)))
                }
                Err(e) => Some((Err(e), None)),
            }
        }
    })
}
