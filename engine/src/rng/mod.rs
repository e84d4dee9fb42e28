//! Random streams that must match the reference bit for bit: the Philox4x32-10 counter
//! generator the token draw keys by the stage seed (curand semantics), and torch's CPU
//! mt19937 normal stream for the acoustic noise, and the 64-bit Mersenne Twister of
//! MiniMax Music 3's token draws.
pub mod mt64;
pub mod philox;
pub mod torch_cpu;
