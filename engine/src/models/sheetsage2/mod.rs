//! SheetSage2 transcriber (yue2.cpp's architecture reference): a recording to an ABC lead
//! sheet (`docs/design/listening-part2.md`). So far the score written from the decoded
//! events ([`notation`]).
pub mod notation;
