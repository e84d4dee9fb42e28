//! AAC-LC through the Fraunhofer FDK encoder: raw ADTS (`aac`) and an MP4 audio file
//! (`m4a`, the mp4 crate's writer plus an edit list that hides the encoder's priming so
//! players that honour it, ffmpeg and Apple's among them, play the exact length).
use crate::{AudioError, Pcm};
use fdk_aac::enc::{AudioObjectType, BitRate, ChannelMode, Encoder, EncoderParams, Transport};

/// Samples per channel in one AAC-LC access unit.
pub const FRAME: usize = 1024;

fn err(e: impl std::fmt::Display) -> AudioError {
    AudioError::Format(format!("aac: {e}"))
}

/// The encoded access units and how many leading samples (per channel) of the decoded
/// stream are encoder priming.
struct Encoded {
    units: Vec<Vec<u8>>,
    priming: usize,
}

fn encode_units(pcm: &Pcm, kbps: u32, transport: Transport) -> Result<Encoded, AudioError> {
    if pcm.channels > 2 {
        return Err(err("at most two channels"));
    }
    let enc = Encoder::new(EncoderParams {
        bit_rate: BitRate::Cbr(kbps * 1000 * pcm.channels as u32 / 2),
        sample_rate: pcm.sample_rate,
        transport,
        channels: if pcm.channels == 1 { ChannelMode::Mono } else { ChannelMode::Stereo },
        audio_object_type: AudioObjectType::Mpeg4LowComplexity,
    })
    .map_err(err)?;
    let info = enc.info().map_err(err)?;
    let priming = info.nDelay as usize;
    let (n, ch) = (pcm.frames(), pcm.channels);
    // Feed the signal then silence until every real sample has left the encoder.
    let need_units = (n + priming).div_ceil(FRAME);
    let mut inter: Vec<i16> = Vec::with_capacity((need_units + 2) * FRAME * ch);
    for i in 0..n {
        for c in 0..ch {
            inter.push((pcm.data[c * n + i].clamp(-1.0, 1.0) * 32767.0).round() as i16);
        }
    }
    let mut units = Vec::with_capacity(need_units);
    let mut out = vec![0u8; 8192];
    let mut at = 0;
    let silence = vec![0i16; FRAME * ch];
    let mut guard = 0;
    while units.len() < need_units {
        let chunk: &[i16] = if at < inter.len() { &inter[at..(at + FRAME * ch).min(inter.len())] } else { &silence };
        let r = enc.encode(chunk, &mut out).map_err(err)?;
        if at < inter.len() {
            at += r.input_consumed;
        }
        if r.output_size > 0 {
            units.push(out[..r.output_size].to_vec());
        }
        guard += 1;
        if guard > 4 * need_units + 64 {
            return Err(err("encoder stopped producing output"));
        }
    }
    Ok(Encoded { units, priming })
}

/// AAC-LC in ADTS frames (`.aac`). The stream carries no length: a decoder plays the
/// encoder's priming and the padding of the last frame.
pub fn encode_adts(pcm: &Pcm, kbps: u32) -> Result<Vec<u8>, AudioError> {
    Ok(encode_units(pcm, kbps, Transport::Adts)?.units.concat())
}

/// AAC-LC in an MP4 audio file (`.m4a`).
pub fn encode_m4a(pcm: &Pcm, kbps: u32) -> Result<Vec<u8>, AudioError> {
    use mp4::{
        AacConfig, ChannelConfig, MediaConfig, Mp4Config, Mp4Sample, Mp4Writer, SampleFreqIndex, TrackConfig, TrackType,
    };
    let freq_index = match pcm.sample_rate {
        96000 => SampleFreqIndex::Freq96000,
        88200 => SampleFreqIndex::Freq88200,
        64000 => SampleFreqIndex::Freq64000,
        48000 => SampleFreqIndex::Freq48000,
        44100 => SampleFreqIndex::Freq44100,
        32000 => SampleFreqIndex::Freq32000,
        24000 => SampleFreqIndex::Freq24000,
        22050 => SampleFreqIndex::Freq22050,
        16000 => SampleFreqIndex::Freq16000,
        r => return Err(err(format!("m4a: sample rate {r} has no AAC frequency index"))),
    };
    let enc = encode_units(pcm, kbps, Transport::Raw)?;
    let rate = pcm.sample_rate;
    let brand = |s: &str| s.parse::<mp4::FourCC>().map_err(err);
    let cfg = Mp4Config {
        major_brand: brand("M4A ")?,
        minor_version: 512,
        compatible_brands: vec![brand("M4A ")?, brand("isom")?, brand("mp42")?],
        timescale: rate,
    };
    let mut w = Mp4Writer::write_start(std::io::Cursor::new(Vec::new()), &cfg).map_err(err)?;
    let chan_conf = if pcm.channels == 1 { ChannelConfig::Mono } else { ChannelConfig::Stereo };
    w.add_track(&TrackConfig {
        track_type: TrackType::Audio,
        timescale: rate,
        language: "und".into(),
        media_conf: MediaConfig::AacConfig(AacConfig {
            bitrate: kbps * 1000,
            profile: mp4::AudioObjectType::AacLowComplexity,
            freq_index,
            chan_conf,
        }),
    })
    .map_err(err)?;
    for (k, unit) in enc.units.into_iter().enumerate() {
        let s = Mp4Sample {
            start_time: (k * FRAME) as u64,
            duration: FRAME as u32,
            rendering_offset: 0,
            is_sync: true,
            bytes: bytes::Bytes::from(unit),
        };
        w.write_sample(1, &s).map_err(err)?;
    }
    w.write_end().map_err(err)?;
    let mut file = w.into_writer().into_inner();
    fix_sl_descriptor(&mut file)?;
    insert_edit_list(file, enc.priming as u64, pcm.frames() as u64)
}

/// The mp4 crate writes the ES descriptor's SLConfigDescriptor as `06 00 00` (length 0,
/// then a stray byte); ISO/IEC 14496-14 wants `06 01 02` (one byte: predefined = 2, "MP4"),
/// and strict readers (symphonia) refuse anything else. Same length, so nothing moves.
fn fix_sl_descriptor(file: &mut [u8]) -> Result<(), AudioError> {
    let at = file.windows(4).rposition(|w| w == b"esds").ok_or_else(|| err("m4a: no esds box"))?;
    let start = at.checked_sub(4).ok_or_else(|| err("m4a: esds"))?;
    let end = start + be32(file, start);
    if end > file.len() || end < start + 11 {
        return Err(err("m4a: esds size"));
    }
    match &file[end - 3..end] {
        [6, 0, 0] => file[end - 2..end].copy_from_slice(&[1, 2]),
        [6, 1, 2] => {}
        other => return Err(err(format!("m4a: unexpected SL descriptor {other:?}"))),
    }
    Ok(())
}

fn be32(b: &[u8], at: usize) -> usize {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]) as usize
}

/// Finds the box `name` among the children in `b[from..to]`: (start, size).
fn find_box(b: &[u8], from: usize, to: usize, name: &[u8; 4]) -> Option<(usize, usize)> {
    let mut at = from;
    while at + 8 <= to {
        let size = be32(b, at);
        if size < 8 || at + size > to {
            return None;
        }
        if &b[at + 4..at + 8] == name {
            return Some((at, size));
        }
        at += size;
    }
    None
}

/// Adds `moov/trak/edts/elst` with one edit: play `frames` samples starting at media time
/// `priming`. The moov box follows mdat in this writer's layout, so no chunk offset moves;
/// the enclosing box sizes and the movie/track durations are updated.
fn insert_edit_list(mut file: Vec<u8>, priming: u64, frames: u64) -> Result<Vec<u8>, AudioError> {
    let bad = || err("m4a: unexpected box layout from the writer");
    let (moov, moov_size) = find_box(&file, 0, file.len(), b"moov").ok_or_else(bad)?;
    let (trak, trak_size) = find_box(&file, moov + 8, moov + moov_size, b"trak").ok_or_else(bad)?;
    let (tkhd, tkhd_size) = find_box(&file, trak + 8, trak + trak_size, b"tkhd").ok_or_else(bad)?;
    // The movie header's and the track header's duration are in the movie timescale (the
    // sample rate here): the presented length.
    let (mvhd, _) = find_box(&file, moov + 8, moov + moov_size, b"mvhd").ok_or_else(bad)?;
    set_header_duration(&mut file, mvhd, 12, frames)?;
    set_header_duration(&mut file, tkhd, 16, frames)?;
    let mut elst = Vec::with_capacity(36);
    let version1 = frames > u32::MAX as u64 || priming > i32::MAX as u64;
    let entry_len = if version1 { 20 } else { 12 };
    let elst_size = 16 + entry_len;
    elst.extend_from_slice(&((8 + elst_size) as u32).to_be_bytes());
    elst.extend_from_slice(b"edts");
    elst.extend_from_slice(&(elst_size as u32).to_be_bytes());
    elst.extend_from_slice(b"elst");
    elst.extend_from_slice(&[if version1 { 1 } else { 0 }, 0, 0, 0]);
    elst.extend_from_slice(&1u32.to_be_bytes());
    if version1 {
        elst.extend_from_slice(&frames.to_be_bytes());
        elst.extend_from_slice(&(priming as i64).to_be_bytes());
    } else {
        elst.extend_from_slice(&(frames as u32).to_be_bytes());
        elst.extend_from_slice(&(priming as i32).to_be_bytes());
    }
    elst.extend_from_slice(&[0, 1, 0, 0]); // media rate 1.0
    let grow = elst.len();
    let at = tkhd + tkhd_size;
    file.splice(at..at, elst);
    for (pos, size) in [(moov, moov_size), (trak, trak_size)] {
        file[pos..pos + 4].copy_from_slice(&((size + grow) as u32).to_be_bytes());
    }
    Ok(file)
}

/// Writes `duration` into a full box whose version-0 duration field sits `off0` bytes
/// after its version/flags word (mvhd: 12, tkhd: 16); version 1 widens the two
/// timestamps before it and the field itself to 64 bits.
fn set_header_duration(file: &mut [u8], start: usize, off0: usize, duration: u64) -> Result<(), AudioError> {
    let version = file[start + 8];
    let at = start + 12 + off0;
    if version == 0 {
        let d = u32::try_from(duration).map_err(|_| err("m4a: duration overflows a version-0 header"))?;
        file[at..at + 4].copy_from_slice(&d.to_be_bytes());
    } else {
        let at = start + 12 + off0 + 8;
        file[at..at + 8].copy_from_slice(&duration.to_be_bytes());
    }
    Ok(())
}
/// The edit list of an MP4 audio file's first track, as decoder instructions: skip this
/// many leading frames, then keep at most that many (frames at `rate`). None when the file
/// has no single-entry edit list (it then plays whole). symphonia reads but does not apply
/// edit lists, so the upload decoder applies this itself.
pub(crate) fn mp4_edit(b: &[u8], rate: u32) -> Option<(usize, usize)> {
    let (moov, moov_size) = find_box(b, 0, b.len(), b"moov")?;
    let (mvhd, _) = find_box(b, moov + 8, moov + moov_size, b"mvhd")?;
    let movie_scale = timescale(b, mvhd, 12)?;
    let (trak, trak_size) = find_box(b, moov + 8, moov + moov_size, b"trak")?;
    let (edts, edts_size) = find_box(b, trak + 8, trak + trak_size, b"edts")?;
    let (elst, elst_size) = find_box(b, edts + 8, edts + edts_size, b"elst")?;
    let (mdia, mdia_size) = find_box(b, trak + 8, trak + trak_size, b"mdia")?;
    let (mdhd, _) = find_box(b, mdia + 8, mdia + mdia_size, b"mdhd")?;
    let media_scale = timescale(b, mdhd, 12)?;
    let version = *b.get(elst + 8)?;
    if elst_size < 16 || be32(b, elst + 12) != 1 {
        return None;
    }
    let e = elst + 16;
    let (dur, start) = if version == 1 {
        let d = u64::from_be_bytes(b.get(e..e + 8)?.try_into().ok()?);
        let t = i64::from_be_bytes(b.get(e + 8..e + 16)?.try_into().ok()?);
        (d, t)
    } else {
        (be32(b.get(..e + 4)?, e) as u64, i32::from_be_bytes(b.get(e + 4..e + 8)?.try_into().ok()?) as i64)
    };
    if start < 0 || movie_scale == 0 || media_scale == 0 {
        return None;
    }
    let skip = (start as u128 * rate as u128 / media_scale as u128) as usize;
    let keep = (dur as u128 * rate as u128 / movie_scale as u128) as usize;
    Some((skip, keep))
}

/// The timescale field of an mvhd/mdhd box (`off0` after the version word in version 0).
fn timescale(b: &[u8], start: usize, off0: usize) -> Option<u32> {
    let at = if *b.get(start + 8)? == 1 { start + 12 + off0 + 4 } else { start + 12 + off0 - 4 };
    Some(be32(b.get(..at + 4)?, at) as u32)
}
