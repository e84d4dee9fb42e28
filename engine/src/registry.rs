//! The model registry: every GGUF of a directory, sorted into buckets by its
//! `general.architecture` (`yued serve --models DIR`). YuE2's two, and MiniMax Music 3's
//! five with the names minimaxmusic.cpp writes, so its published files load unchanged. A
//! file of another architecture, or no GGUF at all, is skipped and said so.
use crate::gguf::GgufFile;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What a model file is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Bucket {
    Yue2,
    Yue2Vae,
    Mm3Lm,
    Mm3Depth,
    Mm3Cond,
    Mm3Dit,
    Mm3Vae,
}

impl Bucket {
    /// MiniMax Music 3's buckets, in the order of its request's component fields.
    pub const MM3: [Bucket; 5] = [Bucket::Mm3Lm, Bucket::Mm3Depth, Bucket::Mm3Cond, Bucket::Mm3Dit, Bucket::Mm3Vae];
    pub const ALL: [Bucket; 7] = [
        Bucket::Yue2,
        Bucket::Yue2Vae,
        Bucket::Mm3Lm,
        Bucket::Mm3Depth,
        Bucket::Mm3Cond,
        Bucket::Mm3Dit,
        Bucket::Mm3Vae,
    ];

    /// The `general.architecture` of the bucket's files.
    pub fn arch(self) -> &'static str {
        match self {
            Bucket::Yue2 => "yue2",
            Bucket::Yue2Vae => "yue2-vae",
            Bucket::Mm3Lm => "mm3-lm",
            Bucket::Mm3Depth => "mm3-depth",
            Bucket::Mm3Cond => "mm3-cond",
            Bucket::Mm3Dit => "mm3-dit",
            Bucket::Mm3Vae => "mm3-vae",
        }
    }

    pub fn from_arch(arch: &str) -> Option<Bucket> {
        Bucket::ALL.into_iter().find(|b| b.arch() == arch)
    }
}

/// One model file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The file name: how a request names it.
    pub name: String,
    pub path: PathBuf,
}

/// A file the scan did not take, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    pub path: PathBuf,
    pub reason: String,
}

/// The files of each bucket, in name order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Registry {
    buckets: BTreeMap<Bucket, Vec<Entry>>,
}

impl Registry {
    /// Reads the header of every `.gguf` file of `dir` (not its subdirectories).
    pub fn scan(dir: &Path) -> std::io::Result<(Registry, Vec<Skipped>)> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x.eq_ignore_ascii_case("gguf")))
            .collect();
        files.sort();
        let mut reg = Registry::default();
        let mut skipped = Vec::new();
        for path in files {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let arch = GgufFile::open(&path)
                .map_err(|e| e.to_string())
                .and_then(|f| f.get_str("general.architecture").map(String::from).map_err(|e| e.to_string()));
            match arch {
                Ok(a) => match Bucket::from_arch(&a) {
                    Some(b) => reg.buckets.entry(b).or_default().push(Entry { name, path }),
                    None => {
                        skipped.push(Skipped { path, reason: format!("architecture '{a}' is not one yued serves") })
                    }
                },
                Err(e) => skipped.push(Skipped { path, reason: e }),
            }
        }
        Ok((reg, skipped))
    }

    /// A registry of given files, each of the bucket its flag names (`yued synth --lm F
    /// --depth F ...`): a file whose architecture is another bucket's is an error saying so.
    pub fn from_files(files: &[(Bucket, &Path)]) -> Result<Registry, String> {
        let mut reg = Registry::default();
        for &(b, path) in files {
            let arch = GgufFile::open(path)
                .map_err(|e| e.to_string())?
                .get_str("general.architecture")
                .map(String::from)
                .map_err(|e| e.to_string())?;
            if arch != b.arch() {
                return Err(format!("{}: a '{arch}' model where a '{}' one belongs", path.display(), b.arch()));
            }
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            reg.buckets.entry(b).or_default().push(Entry { name, path: path.to_path_buf() });
        }
        Ok(reg)
    }

    /// The files of a bucket, in name order.
    pub fn entries(&self, b: Bucket) -> &[Entry] {
        self.buckets.get(&b).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The file a request names for a component: empty = the first in name order, else the
    /// one of that name; a name of another bucket or of none is an error saying which.
    pub fn resolve(&self, b: Bucket, name: &str) -> Result<&Entry, String> {
        if name.is_empty() {
            return self.entries(b).first().ok_or_else(|| format!("no {} model in the registry", b.arch()));
        }
        if let Some(e) = self.entries(b).iter().find(|e| e.name == name) {
            return Ok(e);
        }
        match self.buckets.iter().find(|(_, es)| es.iter().any(|e| e.name == name)) {
            Some((other, _)) => Err(format!("'{name}' is a {} model, not a {} one", other.arch(), b.arch())),
            None => Err(format!(
                "no model file '{name}' (the {} models: {})",
                b.arch(),
                self.entries(b).iter().map(|e| e.name.as_str()).collect::<Vec<_>>().join(", ")
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::GgufWriter;
    use crate::models::yue2::demo::{write_demo, Preset};

    fn gguf_of(path: &Path, arch: &str) {
        let mut w = GgufWriter::new();
        w.set_str("general.architecture", arch);
        w.create(path).unwrap().finish().unwrap();
    }

    #[test]
    fn files_sort_into_buckets_by_architecture() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write_demo(d, Preset::Tiny, 0, &mut |_, _| {}).unwrap();
        gguf_of(&d.join("b-lm.gguf"), "mm3-lm");
        gguf_of(&d.join("a-lm.gguf"), "mm3-lm");
        gguf_of(&d.join("dit.gguf"), "mm3-dit");
        gguf_of(&d.join("llama.gguf"), "llama");
        std::fs::write(d.join("junk.gguf"), b"not a gguf").unwrap();
        std::fs::write(d.join("notes.txt"), b"ignored").unwrap();
        let (r, skipped) = Registry::scan(d).unwrap();
        assert_eq!(
            r.entries(Bucket::Yue2).iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
            ["yue2-demo-tiny.gguf"]
        );
        assert_eq!(r.entries(Bucket::Yue2Vae)[0].name, "yue2-demo-tiny-vae.gguf");
        assert_eq!(
            r.entries(Bucket::Mm3Lm).iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
            ["a-lm.gguf", "b-lm.gguf"],
            "name order"
        );
        assert!(r.entries(Bucket::Mm3Vae).is_empty());
        let why: Vec<(String, &str)> = skipped
            .iter()
            .map(|s| (s.path.file_name().unwrap().to_string_lossy().into_owned(), s.reason.as_str()))
            .collect();
        assert_eq!(why.len(), 2, "{why:?}");
        assert!(why[0].0 == "junk.gguf" && why[1].0 == "llama.gguf" && why[1].1.contains("'llama'"), "{why:?}");
        // Resolution: empty = the first; by name; a name of another bucket or none names it.
        assert_eq!(r.resolve(Bucket::Mm3Lm, "").unwrap().name, "a-lm.gguf");
        assert_eq!(r.resolve(Bucket::Mm3Lm, "b-lm.gguf").unwrap().name, "b-lm.gguf");
        assert!(r.resolve(Bucket::Mm3Lm, "dit.gguf").unwrap_err().contains("mm3-dit"));
        assert!(r.resolve(Bucket::Mm3Lm, "nope.gguf").unwrap_err().contains("a-lm.gguf, b-lm.gguf"));
        assert!(r.resolve(Bucket::Mm3Cond, "").unwrap_err().contains("no mm3-cond"));
    }
}
