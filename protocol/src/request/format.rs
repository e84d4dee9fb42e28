//! The output formats of a rendered track.
use super::*;

/// Export format of the rendered audio.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OutputFormat {
    #[default]
    Mp3,
    Opus,
    Ogg,
    Flac,
    Aac,
    M4a,
    Wav16,
    Wav24,
    /// Raw IEEE float; the only format that skips peak normalisation.
    Wav32,
}

impl OutputFormat {
    /// Every supported format, in the order `/props` lists them.
    pub fn all() -> &'static [OutputFormat] {
        &[
            OutputFormat::Mp3,
            OutputFormat::Opus,
            OutputFormat::Ogg,
            OutputFormat::Flac,
            OutputFormat::Aac,
            OutputFormat::M4a,
            OutputFormat::Wav16,
            OutputFormat::Wav24,
            OutputFormat::Wav32,
        ]
    }

    /// The request spelling of the format.
    pub fn name(self) -> &'static str {
        match self {
            OutputFormat::Mp3 => "mp3",
            OutputFormat::Opus => "opus",
            OutputFormat::Ogg => "ogg",
            OutputFormat::Flac => "flac",
            OutputFormat::Aac => "aac",
            OutputFormat::M4a => "m4a",
            OutputFormat::Wav16 => "wav16",
            OutputFormat::Wav24 => "wav24",
            OutputFormat::Wav32 => "wav32",
        }
    }

    /// File extension, without the dot; the three WAV depths share `wav`.
    pub fn extension(self) -> &'static str {
        match self {
            OutputFormat::Wav16 | OutputFormat::Wav24 | OutputFormat::Wav32 => "wav",
            other => other.name(),
        }
    }

    /// MIME type of the audio part of a result.
    pub fn mime(self) -> &'static str {
        match self {
            OutputFormat::Mp3 => "audio/mpeg",
            // Opus travels in an Ogg container; the codec parameter tells it from Vorbis.
            OutputFormat::Opus => "audio/ogg; codecs=opus",
            OutputFormat::Ogg => "audio/ogg",
            OutputFormat::Flac => "audio/flac",
            OutputFormat::Aac => "audio/aac",
            OutputFormat::M4a => "audio/mp4",
            OutputFormat::Wav16 | OutputFormat::Wav24 | OutputFormat::Wav32 => "audio/wav",
        }
    }

    /// Whether the output stage applies the `peak_clip` normalisation.
    pub fn normalizes(self) -> bool {
        self != OutputFormat::Wav32
    }
}

impl fmt::Display for OutputFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for OutputFormat {
    type Err = RequestError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::all()
            .iter()
            .copied()
            .find(|f| f.name() == s)
            .ok_or_else(|| RequestError::new("output_format", format!("unknown format {s:?}")))
    }
}
