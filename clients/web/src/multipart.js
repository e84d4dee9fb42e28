// Splits a multipart/mixed body (the /job result) into its parts.
const enc = new TextEncoder();
const dec = new TextDecoder();

function indexOf(hay, needle, from) {
  outer: for (let i = from; i <= hay.length - needle.length; i++) {
    for (let j = 0; j < needle.length; j++) if (hay[i + j] !== needle[j]) continue outer;
    return i;
  }
  return -1;
}

// The types a result's parts have; anything else (a part's headers are only as trustworthy as
// its neighbours' bytes) is taken as opaque bytes, never as a page the browser would render.
const TYPES = /^(audio\/[a-z0-9.+-]+|application\/json|application\/octet-stream)$/i;

/** @returns {{type: string, name: string, bytes: Uint8Array}[]} */
export function parseMultipart(buffer, contentType) {
  const m = /boundary=("?)([^";]+)\1/.exec(contentType || "");
  if (!m) throw new Error(`not a multipart body: ${contentType}`);
  const body = new Uint8Array(buffer);
  // A delimiter opens the body or a line (RFC 2046): the same characters inside a part's
  // line (a song's lyrics in its replay JSON) are content, not a delimiter.
  const delim = enc.encode(`--${m[2]}`);
  const lineDelim = enc.encode(`\r\n--${m[2]}`);
  const parts = [];
  let at = indexOf(body.subarray(0, delim.length), delim, 0) === 0 ? 0 : indexOf(body, lineDelim, 0);
  if (at < 0) return parts;
  if (at > 0) at += 2; // past the CRLF, at the delimiter's "--"
  for (;;) {
    let start = at + delim.length;
    if (body[start] === 45 && body[start + 1] === 45) break; // closing "--"
    start += 2; // CRLF
    const headEnd = indexOf(body, enc.encode("\r\n\r\n"), start);
    if (headEnd < 0) break;
    const headers = dec.decode(body.subarray(start, headEnd));
    const next = indexOf(body, lineDelim, headEnd + 2);
    if (next < 0) break;
    const bytes = body.slice(headEnd + 4, next); // the CRLF before the delimiter is the delimiter's
    const declared = ((/^content-type:\s*([^\r\n]+)/im.exec(headers) || [])[1] || "").trim();
    const type = TYPES.test(declared.split(";")[0].trim()) ? declared : "application/octet-stream";
    const name = ((/^content-disposition:[^\r\n]*filename="([^"\r\n/\\]+)"/im.exec(headers) || [])[1]) || "part";
    parts.push({ type, name, bytes });
    at = next + 2;
  }
  return parts;
}
