//! SheetSage2 transcriber (yue2.cpp's architecture reference): a recording to an ABC lead
//! sheet (`docs/design/listening-part2.md`). The head's configuration and vocabulary
//! ([`config`]), its converter ([`convert`]) and demo ([`demo`]), the event grammar
//! ([`grammar`]) and the decoded events ([`events`]), the head's graph ([`head`]), the
//! sliding windows ([`windows`]), the pipeline that runs them ([`pipeline`]), and the score
//! written from the events ([`notation`]).
pub mod config;
pub mod convert;
pub mod demo;
pub mod events;
pub mod grammar;
pub mod head;
pub mod notation;
pub mod pipeline;
pub mod windows;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod parity;
