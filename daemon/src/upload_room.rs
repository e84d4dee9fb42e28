//! The memory the upload routes' bodies share while they are read and taken apart.
use actix_web::http::header::RETRY_AFTER;
use actix_web::HttpResponse;
use yued_protocol::ErrorBody;

/// The memory upload bodies being read at once share: each reserves room before a byte of
/// it is read and holds it while its parts are in memory. A body that finds no room within
/// [`UPLOAD_ROOM_WAIT`] is a 503 with Retry-After, so many large uploads at once wait, or
/// are turned away, instead of taking the daemon's memory. Not first come, first served: a
/// small body does not wait behind a large one that waits for room.
pub struct UploadRoom {
    kib: std::sync::Arc<tokio::sync::Semaphore>,
    total_kib: usize,
}

pub(crate) type UploadPermit = tokio::sync::OwnedSemaphorePermit;

/// How long a body waits for room in the uploads' memory.
pub const UPLOAD_ROOM_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// An upload is in memory about this many times while it is taken apart.
pub const UPLOAD_COPIES: usize = 3;

impl UploadRoom {
    /// `bytes` of room, and at least what one body of `max_body` bytes takes.
    pub fn new(bytes: usize, max_body: usize) -> Self {
        let one = max_body.saturating_mul(UPLOAD_COPIES);
        let total_kib = bytes.max(one).div_ceil(1024);
        let total_kib = total_kib.min(tokio::sync::Semaphore::MAX_PERMITS).min(u32::MAX as usize);
        UploadRoom { kib: std::sync::Arc::new(tokio::sync::Semaphore::new(total_kib)), total_kib }
    }

    pub async fn reserve(&self, bytes: usize) -> Result<UploadPermit, HttpResponse> {
        let kib = bytes.div_ceil(1024).clamp(1, self.total_kib) as u32;
        let deadline = tokio::time::Instant::now() + UPLOAD_ROOM_WAIT;
        loop {
            match self.kib.clone().try_acquire_many_owned(kib) {
                Ok(permit) => return Ok(permit),
                Err(_) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await
                }
                Err(_) => break,
            }
        }
        Err(HttpResponse::ServiceUnavailable().insert_header((RETRY_AFTER, "5")).json(ErrorBody {
            error: "the daemon is reading as many uploads as its upload memory holds; retry in a few seconds".into(),
        }))
    }
}
