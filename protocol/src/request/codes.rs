//! Code lists (`semantic_tokens`, `source_tokens`): parsing and range checks.
use super::*;

/// The shape of a code list, as a pattern (ECMA-262, for the OpenAPI schema): decimal
/// entries separated by commas, ASCII whitespace around any of them, or blank.
/// What [`parse_codes`] reads; the codebook and context bounds are the daemon's.
pub const CODES_PATTERN: &str = r"^[ \t\n\f\r]*([0-9]+[ \t\n\f\r]*(,[ \t\n\f\r]*[0-9]+[ \t\n\f\r]*)*)?$";

/// A text that is not blank: some character that is not whitespace.
pub const NOT_BLANK: &str = r"\S";

/// Parses a comma separated list of semantic codes.
///
/// Surrounding whitespace (a trailing newline of a CSV file) is ignored and the empty string
/// is the empty list; an empty entry, a sign or anything but decimal digits is an error
/// naming the 0-based entry index.
pub fn parse_codes(s: &str) -> Result<Vec<u32>, String> {
    let s = s.trim_ascii();
    if s.is_empty() {
        return Ok(Vec::new());
    }
    s.split(',')
        .enumerate()
        .map(|(i, entry)| {
            let entry = entry.trim_ascii();
            if entry.is_empty() {
                return Err(format!("entry {i} is empty"));
            }
            if !entry.bytes().all(|b| b.is_ascii_digit()) {
                let shown: String = entry.chars().take(24).collect();
                return Err(format!("entry {i} ({shown:?}) is not a non-negative integer"));
            }
            entry.parse::<u32>().map_err(|_| format!("entry {i} ({entry}) is out of range"))
        })
        .collect()
}

/// Parses `s` as codes of `field` and checks them against the codebook and the context.
pub(crate) fn check_codes(field: &str, s: &str, limits: &Limits) -> Result<Vec<u32>, RequestError> {
    let codes = parse_codes(s).map_err(|m| RequestError::new(field, m))?;
    if let Some((i, c)) = codes.iter().enumerate().find(|(_, c)| **c >= limits.codebook_size) {
        return Err(RequestError::new(field, format!("entry {i} ({c}) is outside [0, {})", limits.codebook_size)));
    }
    // The codes prefill together with at least the start token and the end token, so a
    // stream of context - 1 codes or more cannot fit a KV set.
    if !codes.is_empty() && codes.len() as u64 + 2 > u64::from(limits.context) {
        return Err(RequestError::new(
            field,
            format!("{} codes do not fit a context of {} tokens", codes.len(), limits.context),
        ));
    }
    Ok(codes)
}
