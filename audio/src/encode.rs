//! Output containers from planar float PCM: WAV 16/24/32 (hound), MP3 (LAME), FLAC
//! (flacenc), Ogg Opus (libopus), Ogg Vorbis (aoTuV libvorbis), AAC-LC as ADTS and M4A
//! (FDK AAC).
use crate::ogg_opus::OggOpusStream;
use crate::wav::{wav_bytes, WavKind};
use crate::{AudioError, Pcm};
use yued_protocol::OutputFormat;

/// Bitrate of the AAC encodings, kbps (the request's `mp3_bitrate` is for MP3 only).
pub const AAC_KBPS: u32 = 192;
/// Vorbis quality (-0.1..1.0); 0.6 is about 192 kbps for 48 kHz stereo.
pub const VORBIS_QUALITY: f32 = 0.6;

/// The delivery path of rendered audio: percentile peak normalisation (unless the format
/// is wav32, which keeps the raw float), then the container.
pub fn normalize_and_encode(
    mut pcm: Pcm,
    f: OutputFormat,
    peak_clip: i64,
    mp3_kbps: u32,
) -> Result<Vec<u8>, AudioError> {
    if f.normalizes() {
        crate::peak_normalize(&mut pcm.data, peak_clip);
    }
    encode(&pcm, f, mp3_kbps)
}

/// Encodes `pcm` (already normalised where the format wants it) into `f`.
pub fn encode(pcm: &Pcm, f: OutputFormat, mp3_kbps: u32) -> Result<Vec<u8>, AudioError> {
    match f {
        OutputFormat::Wav16 => wav_bytes(pcm, WavKind::Int16),
        OutputFormat::Wav24 => wav_bytes(pcm, WavKind::Int24),
        OutputFormat::Wav32 => wav_bytes(pcm, WavKind::Float32),
        OutputFormat::Mp3 => mp3(pcm, mp3_kbps),
        OutputFormat::Flac => flac(pcm),
        OutputFormat::Opus => {
            // Opus codes at 48 kHz only: other rates are resampled, their rate recorded.
            let at48 = crate::resample::resample(pcm, 48_000)?;
            let mut s = OggOpusStream::new(pcm.channels, 160_000, 1)?.with_input_rate(pcm.sample_rate);
            let mut out = s.push(&at48.data)?;
            out.extend(s.finish()?);
            Ok(out)
        }
        OutputFormat::Ogg => vorbis(pcm),
        OutputFormat::Aac => crate::aac::encode_adts(pcm, AAC_KBPS),
        OutputFormat::M4a => crate::aac::encode_m4a(pcm, AAC_KBPS),
    }
}

fn to_i16(x: f32) -> i16 {
    (x.clamp(-1.0, 1.0) * 32767.0).round() as i16
}

/// The sample rates of MPEG-1 Layer III.
const MPEG1_RATES: [u32; 3] = [32_000, 44_100, 48_000];

/// MPEG-1 Layer III at the song's own rate (48 and 44.1 kHz take every bitrate from 32 to
/// 320 kb/s: LAME would lower the rate below 128 kb/s), the bitrate rounded up to LAME's table.
/// The first frame is the LAME tag (encoder delay and padding): players that honour it
/// (ffmpeg, symphonia, foobar, Apple's) play the exact samples, no more, no fewer. (At 48
/// kb/s and below a frame is too small for it: those files start with the encoder's delay.)
fn mp3(pcm: &Pcm, kbps: u32) -> Result<Vec<u8>, AudioError> {
    // Frames of 48 kb/s and below are known too small: no try with a tag.
    match mp3_tagged(pcm, kbps, kbps > 48)? {
        Some(out) => Ok(out),
        None => Ok(mp3_tagged(pcm, kbps, false)?.expect("no tag asked, none missing")),
    }
}

/// The MP3, with its LAME tag when `tag`; `None` when the tag did not fit its frame.
fn mp3_tagged(pcm: &Pcm, kbps: u32, tag: bool) -> Result<Option<Vec<u8>>, AudioError> {
    use mp3lame_encoder::{max_required_buffer_size, Bitrate, Builder, DualPcm, FlushGap, MonoPcm, Quality};
    let err = |e: &dyn std::fmt::Display| AudioError::Format(format!("mp3: {e}"));
    let brate = match kbps {
        0..=32 => Bitrate::Kbps32,
        33..=40 => Bitrate::Kbps40,
        41..=48 => Bitrate::Kbps48,
        49..=64 => Bitrate::Kbps64,
        65..=80 => Bitrate::Kbps80,
        81..=96 => Bitrate::Kbps96,
        97..=112 => Bitrate::Kbps112,
        113..=128 => Bitrate::Kbps128,
        129..=160 => Bitrate::Kbps160,
        161..=192 => Bitrate::Kbps192,
        193..=224 => Bitrate::Kbps224,
        225..=256 => Bitrate::Kbps256,
        _ => Bitrate::Kbps320,
    };
    let mut b = Builder::new().ok_or_else(|| AudioError::Format("mp3: LAME did not initialise".into()))?;
    b.set_num_channels(pcm.channels as u8).map_err(|e| err(&e))?;
    b.set_sample_rate(pcm.sample_rate).map_err(|e| err(&e))?;
    // MPEG-1's rates take every bitrate: kept. Others (a 96 kHz upload converted, 22.05 kHz)
    // are LAME's to choose, as it must resample them anyway.
    if MPEG1_RATES.contains(&pcm.sample_rate) {
        b.set_output_sample_rate(std::num::NonZeroU32::new(pcm.sample_rate)).map_err(|e| err(&e))?;
    }
    b.set_to_write_vbr_tag(tag).map_err(|e| err(&e))?;
    b.set_brate(brate).map_err(|e| err(&e))?;
    b.set_quality(Quality::Good).map_err(|e| err(&e))?;
    let mut enc = b.build().map_err(|e| err(&e))?;
    // LAME writes into the vector's spare room and fails a call that would overrun it: each
    // call gets its worst case (a quarter more than its samples, and a frame) reserved.
    let mut out = Vec::new();
    let chunk = 1152 * 64;
    let n = pcm.frames();
    let mut at = 0;
    while at < n {
        let end = (at + chunk).min(n);
        out.reserve(max_required_buffer_size(end - at));
        let left: Vec<i16> = pcm.channel(0)[at..end].iter().map(|&x| to_i16(x)).collect();
        if pcm.channels == 1 {
            enc.encode_to_vec(MonoPcm(&left), &mut out).map_err(|e| err(&e))?;
        } else {
            let right: Vec<i16> = pcm.channel(1)[at..end].iter().map(|&x| to_i16(x)).collect();
            enc.encode_to_vec(DualPcm { left: &left, right: &right }, &mut out).map_err(|e| err(&e))?;
        }
        at = end;
    }
    out.reserve(max_required_buffer_size(0));
    // Every sample out (a gapless flush keeps the last ones back for a next file).
    enc.flush_to_vec::<FlushGap>(&mut out).map_err(|e| err(&e))?;
    // The LAME tag, known now, over the first frame LAME left for it. A frame too small to
    // hold it (the lowest bitrates): the file is made again without one.
    if tag {
        let mut frame = Vec::with_capacity(enc.lame_tag_size());
        match enc.lame_tag_encode_to_vec(&mut frame) {
            Some(len) if len.get() <= out.len() => out[..len.get()].copy_from_slice(&frame[..len.get()]),
            _ => return Ok(None),
        }
    }
    Ok(Some(out))
}

fn vorbis(pcm: &Pcm) -> Result<Vec<u8>, AudioError> {
    use std::num::{NonZeroU32, NonZeroU8};
    use vorbis_rs::{VorbisBitrateManagementStrategy, VorbisEncoderBuilder};
    let err = |e: &dyn std::fmt::Display| AudioError::Format(format!("vorbis: {e}"));
    let rate = NonZeroU32::new(pcm.sample_rate).ok_or_else(|| AudioError::Format("vorbis: rate 0".into()))?;
    let ch = u8::try_from(pcm.channels)
        .ok()
        .and_then(NonZeroU8::new)
        .ok_or_else(|| AudioError::Format("vorbis: channel count".into()))?;
    let mut b = VorbisEncoderBuilder::new_with_serial(rate, ch, Vec::new(), 1);
    b.bitrate_management_strategy(VorbisBitrateManagementStrategy::QualityVbr { target_quality: VORBIS_QUALITY });
    let mut enc = b.build().map_err(|e| err(&e))?;
    let n = pcm.frames();
    let block = 4096;
    let mut at = 0;
    while at < n {
        let end = (at + block).min(n);
        let planes: Vec<&[f32]> = (0..pcm.channels).map(|c| &pcm.channel(c)[at..end]).collect();
        enc.encode_audio_block(&planes).map_err(|e| err(&e))?;
        at = end;
    }
    enc.finish().map_err(|e| err(&e))
}

fn flac(pcm: &Pcm) -> Result<Vec<u8>, AudioError> {
    use flacenc::component::BitRepr;
    use flacenc::error::Verify;
    let err = |e: &dyn std::fmt::Debug| AudioError::Format(format!("flac: {e:?}"));
    let n = pcm.frames();
    let mut inter = Vec::with_capacity(n * pcm.channels);
    for i in 0..n {
        for c in 0..pcm.channels {
            inter.push(to_i16(pcm.data[c * n + i]) as i32);
        }
    }
    let cfg = flacenc::config::Encoder::default().into_verified().map_err(|e| err(&e))?;
    let bs = cfg.block_size;
    // Frame by frame rather than flacenc's encode_with_fixed_block_size, whose last frame
    // is a whole block (zero padded): decoders that ignore STREAMINFO's sample count
    // (ffmpeg) would play the padding. Here the last frame holds exactly the tail.
    let mut src = flacenc::source::MemSource::from_samples(&inter, pcm.channels, 16, pcm.sample_rate as usize);
    let mut enc = flacenc::component::Stream::new(pcm.sample_rate as usize, pcm.channels, 16).map_err(|e| err(&e))?;
    let mut buf = (
        flacenc::source::FrameBuf::with_size(pcm.channels, bs).map_err(|e| err(&e))?,
        flacenc::source::Context::new(16, pcm.channels, bs),
    );
    let mut frame_number = 0;
    let mut left = n;
    while left > 0 {
        let size = left.min(bs);
        if size != bs {
            buf.0.resize(size);
        }
        let read = flacenc::source::Source::read_samples(&mut src, size, &mut buf).map_err(|e| err(&e))?;
        if read == 0 {
            break;
        }
        let frame =
            flacenc::encode_fixed_size_frame(&cfg, &buf.0, frame_number, enc.stream_info()).map_err(|e| err(&e))?;
        enc.add_frame(frame);
        frame_number += 1;
        left -= read;
    }
    // The MD5 of the samples as decoded (interleaved s16 little endian), of the song's own
    // length: the context's digest covers the last block padded to a whole one.
    let md5: [u8; 16] = {
        use md5::Digest;
        let mut h = md5::Md5::new();
        for &v in &inter {
            h.update((v as i16).to_le_bytes());
        }
        h.finalize().into()
    };
    let mut sink = flacenc::bitsink::ByteSink::new();
    enc.write(&mut sink).map_err(|e| err(&e))?;
    let mut bytes = sink.as_slice().to_vec();
    // STREAMINFO (right after "fLaC" and its 4-byte block header): the minimum block size
    // excludes the last block (flacenc lets the short tail lower it, which symphonia
    // refuses), and the MD5 of the samples, which the frame-by-frame path must set itself.
    if bytes.len() < 42 || &bytes[..4] != b"fLaC" {
        return Err(AudioError::Format("flac: unexpected stream layout".into()));
    }
    bytes[8..10].copy_from_slice(&(bs as u16).to_be_bytes());
    bytes[10..12].copy_from_slice(&(bs as u16).to_be_bytes());
    let total = n as u64 & ((1 << 36) - 1);
    bytes[21] = (bytes[21] & 0xf0) | ((total >> 32) as u8 & 0x0f);
    bytes[22..26].copy_from_slice(&(total as u32).to_be_bytes());
    bytes[26..42].copy_from_slice(&md5);
    Ok(bytes)
}
