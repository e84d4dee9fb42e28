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

/** @returns {{type: string, name: string, bytes: Uint8Array}[]} */
export function parseMultipart(buffer, contentType) {
  const m = /boundary=("?)([^";]+)\1/.exec(contentType || "");
  if (!m) throw new Error(`not a multipart body: ${contentType}`);
  const body = new Uint8Array(buffer);
  const delim = enc.encode(`--${m[2]}`);
  const parts = [];
  let at = indexOf(body, delim, 0);
  while (at >= 0) {
    let start = at + delim.length;
    if (body[start] === 45 && body[start + 1] === 45) break; // closing "--"
    start += 2; // CRLF
    const headEnd = indexOf(body, enc.encode("\r\n\r\n"), start);
    if (headEnd < 0) break;
    const headers = dec.decode(body.subarray(start, headEnd));
    const next = indexOf(body, delim, headEnd + 4);
    if (next < 0) break;
    const bytes = body.slice(headEnd + 4, next - 2); // minus the CRLF before the delimiter
    const type = (/content-type:\s*([^\r\n]+)/i.exec(headers) || [])[1] || "application/octet-stream";
    const name = (/filename="([^"]+)"/i.exec(headers) || [])[1] || "part";
    parts.push({ type: type.trim(), name, bytes });
    at = next;
  }
  return parts;
}
