//! The corruption heuristic run on a planned score before the semantic stage: it catches
//! scores that are obviously broken (no usable meter, note length or key, no bar structure,
//! voices used without a name, stray colons in the music), not every invalid ABC. A score
//! the caller wrote is never checked here.

/// Why a score looks malformed.
pub fn check_abc(abc: &str) -> Result<(), String> {
    let mut meter = None;
    let mut length = None;
    let mut key = None;
    let mut bars = 0usize;
    let mut body_lines = 0usize;
    for (n, raw) in abc.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('%') {
            continue;
        }
        if let Some((field, value)) = header_field(line) {
            let value = value.trim();
            match field {
                'M' => meter = Some(value.to_string()),
                'L' => length = Some(value.to_string()),
                'K' => key = Some(value.to_string()),
                'V' if value.split_whitespace().next().is_none() => {
                    return Err(format!("line {}: a voice without a name", n + 1))
                }
                _ => {}
            }
            continue;
        }
        body_lines += 1;
        let music = strip_quoted(line);
        bars += music.matches('|').count();
        let b = music.as_bytes();
        for (i, &c) in b.iter().enumerate() {
            if c == b':' {
                let near_bar =
                    (i > 0 && matches!(b[i - 1], b'|' | b':')) || (i + 1 < b.len() && matches!(b[i + 1], b'|' | b':'));
                if !near_bar {
                    return Err(format!("line {}: suspicious colon outside a repeat sign", n + 1));
                }
            }
        }
    }
    let meter = meter.ok_or("no meter (M:) field")?;
    if !valid_meter(&meter) {
        return Err(format!("meter '{meter}' is not a time signature"));
    }
    let length = length.ok_or("no note length (L:) field")?;
    if !valid_fraction(&length) {
        return Err(format!("note length '{length}' is not a fraction like 1/8"));
    }
    let key = key.ok_or("no key (K:) field")?;
    if !valid_key(&key) {
        return Err(format!("key '{key}' is not a key signature"));
    }
    if body_lines == 0 || bars == 0 {
        return Err("no bars: the score has no music body".into());
    }
    Ok(())
}

/// `X:value` header-style lines (a letter, a colon), as ABC fields and inline voices are.
fn header_field(line: &str) -> Option<(char, &str)> {
    let mut it = line.chars();
    let f = it.next()?;
    (f.is_ascii_alphabetic() && it.next() == Some(':')).then(|| (f, &line[2..]))
}

/// Removes "chord symbols" and !decorations! where colons may legitimately appear.
fn strip_quoted(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_q = false;
    let mut in_deco = false;
    for c in line.chars() {
        match c {
            '"' if !in_deco => in_q = !in_q,
            '!' if !in_q => in_deco = !in_deco,
            _ if in_q || in_deco => {}
            _ => out.push(c),
        }
    }
    out
}

fn valid_fraction(s: &str) -> bool {
    let Some((a, b)) = s.split_once('/') else { return false };
    let (Ok(a), Ok(b)) = (a.trim().parse::<u32>(), b.trim().parse::<u32>()) else { return false };
    a > 0 && b > 0 && b.is_power_of_two() && b <= 64
}

fn valid_meter(s: &str) -> bool {
    matches!(s, "C" | "C|" | "none") || valid_fraction(s) || {
        // compound numerators like 2+3/8
        s.split_once('/').is_some_and(|(a, b)| {
            a.split('+').all(|x| x.trim().parse::<u32>().is_ok_and(|v| v > 0))
                && b.trim().parse::<u32>().is_ok_and(|v| v.is_power_of_two())
        })
    }
}

fn valid_key(s: &str) -> bool {
    let first = s.split_whitespace().next().unwrap_or("");
    if first.is_empty() || first == "none" || first == "HP" || first == "Hp" {
        return !first.is_empty();
    }
    let mut chars = first.chars();
    let tonic = chars.next().unwrap();
    if !('A'..='G').contains(&tonic) {
        return false;
    }
    let rest: String = chars.collect();
    let rest = rest.trim_start_matches(['#', 'b']).to_ascii_lowercase();
    [
        "",
        "m",
        "min",
        "minor",
        "maj",
        "major",
        "ion",
        "ionian",
        "dor",
        "dorian",
        "phr",
        "phrygian",
        "lyd",
        "lydian",
        "mix",
        "mixolydian",
        "aeo",
        "aeolian",
        "loc",
        "locrian",
    ]
    .contains(&rest.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "X:1\nT:City Lights\nM:4/4\nL:1/8\nK:G\nV:1 name=\"Vocal\"\n|:\"G\"GABc d2 e2|\"C\"c2 B2 \
        A4:|\n|\"D7\"d2 cB A2 G2|]\n";

    #[test]
    fn accepts_a_plain_score() {
        check_abc(GOOD).unwrap();
        check_abc("M:C|\nL:1/16\nK:Bbmin\n|: A :: B :|\n").unwrap();
        check_abc("M:6/8\nL:1/8\nK:F# dorian\nabc|def|\n").unwrap();
    }

    #[test]
    fn rejects_each_kind_of_damage() {
        let cases = [
            (GOOD.replace("M:4/4\n", ""), "meter"),
            (GOOD.replace("M:4/4", "M:4/five"), "meter"),
            (GOOD.replace("L:1/8", "L:1/7"), "note length"),
            (GOOD.replace("L:1/8\n", ""), "note length"),
            (GOOD.replace("K:G", "K:H"), "key"),
            (GOOD.replace("K:G\n", ""), "key"),
            ("M:4/4\nL:1/8\nK:C\nabc def\n".to_string(), "no bars"),
            (GOOD.replace("d2 e2|", "d2 e:2|"), "colon"),
            (GOOD.replace("V:1 name=\"Vocal\"", "V:"), "voice"),
            ("".to_string(), "meter"),
        ];
        for (abc, want) in cases {
            let e = check_abc(&abc).unwrap_err();
            assert!(e.contains(want), "{abc:?}: {e}");
        }
    }

    #[test]
    fn colons_inside_chords_and_decorations_are_fine() {
        check_abc("M:4/4\nL:1/8\nK:C\n\"A:m\"abc !fermata:x!d|\n").unwrap();
    }
}
