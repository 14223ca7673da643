// A strict RFC 8259 JSON parser that keeps every number's source text.
//
// JavaScript's JSON.parse turns every number into an IEEE double, so `1.0` and `1` become the same value and
// integers above 2**53 lose digits. The r3wire spec ("Decoders on double-based JSON parsers" in
// docs/wire-format.md) makes integer-ness and range a property of the number token in the text, so a decoder
// must see the token: this parser returns each number as a JsonNumber holding its text.
//
// Objects become null-prototype objects (a member named "__proto__" is an ordinary member). Nesting deeper than
// MAX_DEPTH, NaN/Infinity, trailing commas, leading zeros and raw control characters in strings are syntax
// errors, thrown where they are met. Three faults of valid text are reported only once the whole text has parsed
// (wire-format.md §13, "Several faults in one text"): first the earliest, in text order, of a number with a
// fraction or an exponent beyond a double's range (1e400, never read as Infinity) and an unpaired surrogate
// escape (I-JSON, RFC 7493) in a string value or a member name -- a JsonValueError, which carries the place
// (`parts`; for a member name, ending with that name) -- and only then a duplicate member name.

export const MAX_DEPTH = 1024;

export class JsonSyntaxError extends Error {
  constructor(message, offset) {
    super(`${message} at offset ${offset}`);
    this.name = "JsonSyntaxError";
    this.offset = offset;
  }
}

/** A syntax error in a value whose place is known: `parts`, the keys and indices from the root to it. */
export class JsonValueError extends JsonSyntaxError {
  constructor(message, offset, parts) {
    super(message, offset);
    this.name = "JsonValueError";
    this.parts = parts;
  }
}

const INTEGER = /^-?(?:0|[1-9][0-9]*)$/;

/** A JSON number token, exactly as written. */
export class JsonNumber {
  constructor(text) {
    this.text = text;
  }

  /** True when the token has no fraction and no exponent: the only spelling of a wire integer. */
  isInteger() {
    return INTEGER.test(this.text);
  }

  /** The exact value of an integer token (call isInteger first). */
  toBigInt() {
    return BigInt(this.text);
  }

  /** The nearest double, as JSON.parse would give. */
  toNumber() {
    return Number(this.text);
  }

  toString() {
    return this.text;
  }
}

const NUMBER = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;
const ESCAPES = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };

/** Parse JSON text; numbers become JsonNumber. Throws JsonSyntaxError. */
export function parseJson(text) {
  let pos = 0;
  // The place of the value being parsed (keys and indices), for the errors that name it; `inKey` while a member
  // name is read (a bad name is a syntax error without a place).
  const parts = [];
  let inKey = false;
  // The first fault of valid text at a place, the first duplicate member name, and a fault met in the member
  // name being read (its place is known once the name is).
  let valueError = null;
  let duplicate = null;
  let keyFault = null;

  const fail = (message) => {
    throw new JsonSyntaxError(message, pos);
  };
  const failAt = (message) => {
    if (inKey) keyFault ??= message;
    else valueError ??= new JsonValueError(message, pos, [...parts]);
  };
  const skipSpace = () => {
    while (pos < text.length) {
      const c = text.charCodeAt(pos);
      if (c !== 0x20 && c !== 0x09 && c !== 0x0a && c !== 0x0d) break;
      pos++;
    }
  };

  const readEscape = (at) => {
    const hex = text.slice(at + 2, at + 6);
    if (!/^[0-9a-fA-F]{4}$/.test(hex)) fail("bad \\u escape");
    return parseInt(hex, 16);
  };

  const parseString = () => {
    pos++; // the opening quote
    let out = "";
    let start = pos;
    for (;;) {
      if (pos >= text.length) fail("unterminated string");
      const c = text.charCodeAt(pos);
      if (c === 0x22) {
        out += text.slice(start, pos);
        pos++;
        return out;
      }
      if (c < 0x20) fail("control character in string");
      if (c !== 0x5c) {
        pos++;
        continue;
      }
      out += text.slice(start, pos);
      const e = text[pos + 1];
      if (e === "u") {
        const unit = readEscape(pos);
        pos += 6;
        if (unit >= 0xdc00 && unit <= 0xdfff) failAt("unpaired surrogate escape");
        if (unit >= 0xd800 && unit <= 0xdbff) {
          const low = text.startsWith("\\u", pos) ? readEscape(pos) : -1;
          if (low < 0xdc00 || low > 0xdfff) {
            failAt("unpaired surrogate escape");
            out += String.fromCharCode(unit);
          } else {
            out += String.fromCharCode(unit, low);
            pos += 6;
          }
        } else {
          out += String.fromCharCode(unit);
        }
      } else if (e !== undefined && Object.hasOwn(ESCAPES, e)) {
        out += ESCAPES[e];
        pos += 2;
      } else {
        fail("bad escape");
      }
      start = pos;
    }
  };

  const parseValue = (depth) => {
    skipSpace();
    if (pos >= text.length) fail("unexpected end of text");
    const c = text[pos];
    if (c === "{" || c === "[") {
      if (depth >= MAX_DEPTH) fail(`nesting deeper than ${MAX_DEPTH}`);
      return c === "{" ? parseObject(depth + 1) : parseArray(depth + 1);
    }
    if (c === '"') return parseString();
    for (const [word, value] of [
      ["true", true],
      ["false", false],
      ["null", null],
    ]) {
      if (text.startsWith(word, pos)) {
        pos += word.length;
        return value;
      }
    }
    NUMBER.lastIndex = pos;
    const match = NUMBER.exec(text);
    if (match === null) fail("unexpected character");
    const number = new JsonNumber(match[0]);
    // An integer token is exact at any size (BigInt); any other must be a double's, never Infinity.
    if (!number.isInteger() && !Number.isFinite(number.toNumber())) failAt(`number ${match[0]} out of range`);
    pos += match[0].length;
    return number;
  };

  const parseObject = (depth) => {
    pos++;
    const out = Object.create(null);
    skipSpace();
    if (text[pos] === "}") {
      pos++;
      return out;
    }
    for (;;) {
      skipSpace();
      if (text[pos] !== '"') fail("expected a member name");
      const keyAt = pos;
      inKey = true;
      keyFault = null;
      const key = parseString();
      inKey = false;
      if (keyFault !== null) valueError ??= new JsonValueError(keyFault, keyAt, [...parts, key]);
      if (Object.hasOwn(out, key)) duplicate ??= new JsonSyntaxError(`duplicate member name ${JSON.stringify(key)}`, keyAt);
      skipSpace();
      if (text[pos] !== ":") fail("expected ':'");
      pos++;
      parts.push(key);
      out[key] = parseValue(depth);
      parts.pop();
      skipSpace();
      if (text[pos] === ",") {
        pos++;
        continue;
      }
      if (text[pos] === "}") {
        pos++;
        return out;
      }
      fail("expected ',' or '}'");
    }
  };

  const parseArray = (depth) => {
    pos++;
    const out = [];
    skipSpace();
    if (text[pos] === "]") {
      pos++;
      return out;
    }
    for (;;) {
      parts.push(out.length);
      out.push(parseValue(depth));
      parts.pop();
      skipSpace();
      if (text[pos] === ",") {
        pos++;
        continue;
      }
      if (text[pos] === "]") {
        pos++;
        return out;
      }
      fail("expected ',' or ']'");
    }
  };

  const value = parseValue(0);
  skipSpace();
  if (pos !== text.length) fail("trailing characters");
  if (valueError !== null) throw valueError;
  if (duplicate !== null) throw duplicate;
  return value;
}
