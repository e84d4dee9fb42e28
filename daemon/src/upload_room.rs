//! The memory the upload routes' bodies share while they are read and taken apart.
use actix_web::http::header::RETRY_AFTER;
use actix_web::http::StatusCode;
use actix_web::HttpResponse;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use yued_protocol::ErrorBody;

/// The memory upload bodies being read at once share. A body's room is taken at its first
/// byte (its declared length; a body of unknown length grows as it comes), and is held while
/// its parts are in memory. Room that does not come within
/// [`UPLOAD_ROOM_WAIT`] is a 503 with Retry-After, so many large uploads at once wait, or are
/// turned away, instead of taking the daemon's memory. Each principal holds at most its share
/// (half the room, and at least one largest body): a body past it waits for the principal's
/// others as long, then is a 429, so one client's uploads never shut the others out. Not
/// first come, first served: a small body does not wait behind a large one that waits for room.
pub struct UploadRoom {
    kib: Arc<Semaphore>,
    total_kib: usize,
    share_kib: usize,
    /// How long a body waits for room ([`UPLOAD_ROOM_WAIT`]).
    wait: std::time::Duration,
    /// KiB held by each principal's bodies.
    held: Arc<Mutex<HashMap<String, usize>>>,
    /// Counts each refusal (the admission refusals' counter).
    on_refusal: Option<Box<dyn Fn() + Send + Sync>>,
}

/// A body's room: what it holds, given back (to the room and to its principal's count) when
/// it is dropped.
pub struct UploadPermit {
    permit: Option<OwnedSemaphorePermit>,
    kib: usize,
    who: String,
    held: Arc<Mutex<HashMap<String, usize>>>,
}

impl UploadPermit {
    /// Bytes of room held.
    pub fn bytes(&self) -> usize {
        self.kib * 1024
    }
}

impl Drop for UploadPermit {
    fn drop(&mut self) {
        let mut held = self.held.lock().expect("upload room lock");
        if let Some(n) = held.get_mut(&self.who) {
            *n = n.saturating_sub(self.kib);
            if *n == 0 {
                held.remove(&self.who);
            }
        }
    }
}

/// How long a body waits for room in the uploads' memory.
pub const UPLOAD_ROOM_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// An upload is in memory about this many times while it is taken apart.
pub const UPLOAD_COPIES: usize = 3;

impl UploadRoom {
    /// `bytes` of room, and at least what one body of `max_body` bytes takes.
    pub fn new(bytes: usize, max_body: usize) -> Self {
        let one = max_body.saturating_mul(UPLOAD_COPIES).div_ceil(1024);
        let total_kib = bytes.div_ceil(1024).max(one);
        let total_kib = total_kib.min(Semaphore::MAX_PERMITS).min(u32::MAX as usize);
        let share_kib = (total_kib / 2).max(one).min(total_kib);
        let kib = Arc::new(Semaphore::new(total_kib));
        UploadRoom { kib, total_kib, share_kib, wait: UPLOAD_ROOM_WAIT, held: Default::default(), on_refusal: None }
    }

    /// Calls `count` at each refusal.
    pub fn counting(mut self, count: impl Fn() + Send + Sync + 'static) -> Self {
        self.on_refusal = Some(Box::new(count));
        self
    }

    /// An empty room for a body of `who` (a principal id).
    pub fn start(&self, who: &str) -> UploadPermit {
        UploadPermit { permit: None, kib: 0, who: who.to_string(), held: self.held.clone() }
    }

    /// Grows `permit` to hold `bytes`, waiting up to [`UPLOAD_ROOM_WAIT`] for the room.
    pub async fn grow(&self, permit: &mut UploadPermit, bytes: usize) -> Result<(), HttpResponse> {
        let want = bytes.div_ceil(1024).min(self.total_kib);
        if want <= permit.kib {
            return Ok(());
        }
        let more = want - permit.kib;
        let deadline = tokio::time::Instant::now() + self.wait;
        let p = loop {
            let short_of = {
                // Counted with the room taken, so that two bodies of one principal cannot both
                // pass the check.
                let mut held = self.held.lock().expect("upload room lock");
                let mine = held.get(&permit.who).copied().unwrap_or(0);
                if mine + more > self.share_kib {
                    // Past its share; where the room is short too, that is what to say.
                    if self.kib.available_permits() >= more {
                        Short::Share
                    } else {
                        Short::Room
                    }
                } else if let Ok(p) = self.kib.clone().try_acquire_many_owned(more as u32) {
                    *held.entry(permit.who.clone()).or_default() += more;
                    break p;
                } else {
                    Short::Room
                }
            };
            if tokio::time::Instant::now() >= deadline {
                if let Some(count) = &self.on_refusal {
                    count();
                }
                return Err(match short_of {
                    Short::Share => refusal(
                        StatusCode::TOO_MANY_REQUESTS,
                        format!(
                            "the caller's uploads being read already hold its share of the upload memory ({} MiB); \
                            retry when they are done",
                            self.share_kib / 1024
                        ),
                    ),
                    Short::Room => refusal(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "the daemon is reading as many uploads as its upload memory holds; retry in a few seconds"
                            .into(),
                    ),
                });
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        };
        match &mut permit.permit {
            Some(held) => held.merge(p),
            none => *none = Some(p),
        }
        permit.kib = want;
        Ok(())
    }
}

enum Short {
    Share,
    Room,
}

fn refusal(status: StatusCode, error: String) -> HttpResponse {
    HttpResponse::build(status).insert_header((RETRY_AFTER, "5")).json(ErrorBody { error })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[actix_web::test]
    async fn a_body_holds_what_came_and_a_principal_its_share() {
        // 8 MiB of room, bodies of at most 1 MiB (3 MiB of room each): a share of 4 MiB.
        let mut room = UploadRoom::new(8 << 20, 1 << 20);
        room.wait = std::time::Duration::from_millis(200);
        let mut a = room.start("alice");
        room.grow(&mut a, 1 << 20).await.unwrap();
        room.grow(&mut a, 512 << 10).await.unwrap();
        assert_eq!(a.bytes(), 1 << 20, "room only grows");
        room.grow(&mut a, 4 << 20).await.unwrap();
        let mut a2 = room.start("alice");
        let r = room.grow(&mut a2, 1).await.unwrap_err();
        assert_eq!(r.status(), 429);
        // Past the room as well: the room is what is short.
        let mut c = room.start("carol");
        room.grow(&mut c, 4 << 20).await.unwrap();
        assert_eq!(room.grow(&mut a2, 1).await.unwrap_err().status(), 503);
        drop(c);
        // Bob is not shut out, and Alice's room comes back when her body goes.
        let mut b = room.start("bob");
        room.grow(&mut b, 4 << 20).await.unwrap();
        drop(a);
        room.grow(&mut a2, 4 << 20).await.unwrap();
        assert!(room.held.lock().unwrap().values().all(|&kib| kib == 4096));
        drop((a2, b));
        assert!(room.held.lock().unwrap().is_empty());
        assert_eq!(room.kib.available_permits(), 8192);
    }
}
