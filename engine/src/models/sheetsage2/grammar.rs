//! The event grammar greedy decoding runs under (`docs/design/listening-part2.md` 3.2): an
//! event is one to four subbeat shifts, then its fields in the order timestamp < rhythm <
//! structure < key < chord < melody, each once but melody (any number of `pitch [duration]`
//! notes); a meter is followed by an eighth position or ends the rhythm, eos once the event
//! has a payload. The major/minor chord range is never allowed (only the full-chord task is
//! prompted).
use super::config::{Kind, Vocab};

/// At most this many shifts in a row.
const MAX_SHIFTS: u32 = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    None,
    /// A meter was drawn: an eighth position may follow.
    EighthAfterMeter,
    /// A pitch was drawn: a duration or another pitch may follow.
    AfterPitch,
}

/// Where a stream stands.
#[derive(Clone, Debug)]
pub struct Grammar {
    in_shift: bool,
    shift_run: u32,
    payload: u32,
    /// The last field written in this event (timestamp 0 .. melody 5), -1 for none.
    last_field: i32,
    pending: Pending,
}

/// A token the grammar cannot take.
#[derive(Debug, thiserror::Error)]
#[error("unexpected token {0} in the event stream")]
pub struct Unexpected(pub u32);

impl Default for Grammar {
    fn default() -> Self {
        Grammar { in_shift: true, shift_run: 0, payload: 0, last_field: -1, pending: Pending::None }
    }
}

impl Grammar {
    /// The token ranges allowed next, in the order yue2.cpp lists them.
    pub fn allowed(&self, v: &Vocab) -> Vec<std::ops::Range<u32>> {
        let mut out = Vec::new();
        if self.payload > 0 {
            out.push(v.eos..v.eos + 1);
        }
        if (self.payload > 0 || self.in_shift) && self.shift_run < MAX_SHIFTS {
            out.push(v.range(Kind::SubbeatShift));
        }
        match self.pending {
            Pending::EighthAfterMeter => {
                out.push(v.range(Kind::EighthPosition));
                return out;
            }
            Pending::AfterPitch => {
                out.push(v.range(Kind::Duration));
                out.push(v.range(Kind::Pitch));
                return out;
            }
            Pending::None => {}
        }
        let fields = [
            (0, Kind::Time),
            (1, Kind::Meter),
            (1, Kind::EighthPosition),
            (2, Kind::Structure),
            (3, Kind::Key),
            (4, Kind::FullChord),
        ];
        for (field, kind) in fields {
            if self.last_field < field {
                out.push(v.range(kind));
            }
        }
        out.push(v.range(Kind::Pitch));
        out
    }

    /// Takes a drawn token; eos ends the stream (the caller stops).
    pub fn update(&mut self, v: &Vocab, token: u32) -> Result<(), Unexpected> {
        if token == v.eos {
            return Ok(());
        }
        let (kind, _) = v.kind_of(token).ok_or(Unexpected(token))?;
        if kind == Kind::SubbeatShift {
            if !self.in_shift && self.payload > 0 {
                self.payload = 0;
                self.last_field = -1;
                self.pending = Pending::None;
            }
            self.in_shift = true;
            self.shift_run += 1;
            return Ok(());
        }
        let (field, pending) = match kind {
            Kind::Time => (0, Pending::None),
            Kind::Meter => (1, Pending::EighthAfterMeter),
            Kind::EighthPosition => (1, Pending::None),
            Kind::Structure => (2, Pending::None),
            Kind::Key => (3, Pending::None),
            Kind::FullChord => (4, Pending::None),
            Kind::Pitch => (5, Pending::AfterPitch),
            Kind::Duration => (5, Pending::None),
            Kind::Prompt | Kind::MajminChord | Kind::SubbeatShift => return Err(Unexpected(token)),
        };
        self.in_shift = false;
        self.shift_run = 0;
        self.payload += 1;
        self.last_field = field;
        self.pending = pending;
        Ok(())
    }
}

/// The highest logit among the allowed tokens, the first on a tie.
pub fn choose(logits: &[f32], allowed: &[std::ops::Range<u32>]) -> u32 {
    let mut best: Option<(u32, f32)> = None;
    let mut ids: Vec<u32> = allowed.iter().flat_map(|r| r.clone()).collect();
    ids.sort_unstable();
    ids.dedup();
    for t in ids {
        let l = logits[t as usize];
        if best.is_none_or(|(_, b)| l > b) {
            best = Some((t, l));
        }
    }
    best.expect("the grammar always allows a token").0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_runs_its_fields_in_order_and_ends_with_a_payload() {
        let v = Vocab::build(30_000);
        let mut g = Grammar::default();
        let has = |g: &Grammar, t: u32| g.allowed(&v).iter().any(|r| r.contains(&t));
        assert!(!has(&g, v.eos), "no eos before a payload");
        assert!(has(&g, 517), "a time at the very start");
        g.update(&v, 260).unwrap();
        g.update(&v, 517 + 10).unwrap();
        assert!(has(&g, v.eos) && !has(&g, 517));
        g.update(&v, v.range(Kind::Meter).start + 20).unwrap();
        assert!(has(&g, 30709) && !has(&g, v.range(Kind::Key).start), "an eighth or the end after a meter");
        g.update(&v, 30709).unwrap();
        assert!(!has(&g, 30709) && has(&g, v.range(Kind::Key).start));
        assert!(!has(&g, v.range(Kind::MajminChord).start) && has(&g, v.range(Kind::FullChord).start));
        g.update(&v, 31398 + 60).unwrap();
        assert!(has(&g, 31654) && has(&g, 31398) && !has(&g, v.range(Kind::FullChord).start));
        for _ in 0..4 {
            assert!(has(&g, 260));
            g.update(&v, 300).unwrap();
        }
        assert!(!has(&g, 260), "at most four shifts in a row");
        assert!(has(&g, 517), "a new event");
        assert!(g.update(&v, v.range(Kind::MajminChord).start).is_err());
    }

    #[test]
    fn ties_go_to_the_first_allowed_token() {
        let logits = [0.0, 3.0, 3.0, 5.0, 1.0];
        assert_eq!(choose(&logits, std::slice::from_ref(&(1..3))), 1);
        assert_eq!(choose(&logits, &[4..5, 1..3]), 1);
        assert_eq!(choose(&logits, std::slice::from_ref(&(0..5))), 3);
    }
}
