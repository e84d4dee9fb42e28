//! Minimal `.npy` writer (format 1.0) for `--dump`: little-endian f32 or i32 arrays.
use std::io::Write;
use std::path::Path;

fn write(path: &Path, descr: &str, shape: &[usize], data: &[u8]) -> std::io::Result<()> {
    let shape_txt = match shape.len() {
        1 => format!("({},)", shape[0]),
        _ => format!("({})", shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_txt}, }}");
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    f.write_all(b"\x93NUMPY\x01\x00")?;
    f.write_all(&(header.len() as u16).to_le_bytes())?;
    f.write_all(header.as_bytes())?;
    f.write_all(data)?;
    f.flush()
}

pub fn write_f32(path: &Path, shape: &[usize], v: &[f32]) -> std::io::Result<()> {
    assert_eq!(shape.iter().product::<usize>(), v.len());
    write(path, "<f4", shape, &v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>())
}

pub fn write_i32(path: &Path, shape: &[usize], v: &[i32]) -> std::io::Result<()> {
    assert_eq!(shape.iter().product::<usize>(), v.len());
    write(path, "<i4", shape, &v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>())
}
