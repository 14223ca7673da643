// A reference decoder for the r3wire wire format, version 1, written from docs/ alone (wire-format.md,
// bitpack-and-frame.md, envelope.schema.json), not from r3wire's Python source. Dependency-free ES module for
// Node >= 18. It exists to prove the spec is implementable in a language whose JSON.parse yields doubles.
//
//   decodeRoutes(input, {numExperts, maxElements, seedOnly})  r3wire.routes envelopes (packed too), seed form
//   decodeArray(input, {maxElements})                 r3wire.array envelopes
//   decodeLogprobs(input, {maxElements})              r3wire.logprobs envelopes
//   decodeRoutesFrame(bytes, {numExperts, maxElements})  the 32-byte-header binary frame
//
// maxElements is the caller's element limit, compared with the extent (the product of the non-zero shape
// entries); null means DEFAULT_MAX_ELEMENTS (2**30), as in r3wire.
//
// `input` is JSON text (conforming: numbers are read from the text), or a value from parseJson (json.mjs).
// A value built in-process may use safe-integer Numbers or BigInts; a tree from JSON.parse is NOT conforming,
// because JSON.parse has already turned `1.0` into `1`.
//
// Every failure is a DecodeError with `field` (a member name, `data[i, j, k]`, or null for the payload as a
// whole), `expected` and `got`. Results: {dtype, shape: BigInt[], bytes: Uint8Array (little-endian, as on the
// wire; for packed routes the unpacked ids as `dtype`), values: Number[] | BigInt[] (flat, C order)}.

import { JsonNumber, JsonSyntaxError, JsonValueError, parseJson } from "./json.mjs";

export const SUPPORTED_VERSIONS = [1n];
export const MAX_NDIM = 32;
const MAX_DIMENSION = 2n ** 63n - 1n;
// §8 step 5: the product of the non-zero shape entries, so that any array of those dimensions has a byte size
// that fits a signed 64-bit integer.
const MAX_EXTENT = 2n ** 60n - 1n;
// §12: the element limit when the application states none.
export const DEFAULT_MAX_ELEMENTS = 2n ** 30n;
const MAX_NUM_EXPERTS = 2n ** 31n;
const MAX_GOT = 80;

// §3: the closed list of element types and their sizes in bytes.
export const DTYPE_SIZES = {
  bool: 1,
  uint8: 1,
  int8: 1,
  uint16: 2,
  int16: 2,
  uint32: 4,
  int32: 4,
  uint64: 8,
  int64: 8,
  float16: 2,
  float32: 4,
  float64: 8,
};
const ROUTE_DTYPES = ["uint8", "int16", "int32"];
const LOGPROB_DTYPES = ["float32", "float64"];
// The largest id each route dtype holds, and its widest packed width (§6a).
const ROUTE_MAX = { uint8: 255, int16: 32767, int32: 2147483647 };
const ROUTE_BITS = { uint8: [1, 8], int16: [9, 15], int32: [16, 31] };

export function show(value) {
  let text;
  if (value instanceof JsonNumber) text = value.text;
  else if (typeof value === "bigint") text = value.toString();
  else if (value === undefined) text = "nothing";
  else if (typeof value === "number" && !Number.isFinite(value)) text = String(value); // not JSON's null
  else {
    try {
      text = JSON.stringify(value, (_, v) => (v instanceof JsonNumber ? Number(v.text) : v));
    } catch {
      text = String(value);
    }
  }
  return text.length > MAX_GOT ? `${text.slice(0, MAX_GOT)}...` : text;
}

export class DecodeError extends Error {
  constructor(field, expected, got, { unsupportedVersion = false } = {}) {
    super(`${field ?? "payload"} must be ${expected}, got ${got}`);
    this.name = unsupportedVersion ? "UnsupportedVersionError" : "DecodeError";
    this.field = field;
    this.expected = expected;
    this.got = got;
    this.unsupportedVersion = unsupportedVersion;
  }
}

export function reject(field, expected, value) {
  throw new DecodeError(field, expected, show(value));
}

/** The exact integer a wire integer denotes, or null: a JSON integer token, a BigInt, or a safe-integer Number. */
export function integerOf(value) {
  if (value instanceof JsonNumber) return value.isInteger() ? value.toBigInt() : null;
  if (typeof value === "bigint") return value;
  if (typeof value === "number" && Number.isSafeInteger(value)) return BigInt(value);
  return null; // booleans, strings, null, fractions and exponents are not integers
}

export function isPlainObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value) && !(value instanceof JsonNumber);
}

export function parseInput(input, where = memberNames) {
  if (typeof input !== "string") return input;
  try {
    return parseJson(input);
  } catch (error) {
    // wire-format.md §13: a string value with an unpaired surrogate, or a number beyond a double's range, is
    // named at its place; any other invalid text has none (field null).
    if (error instanceof JsonValueError) reject(where(error.parts), "a valid JSON value", error.message);
    if (error instanceof JsonSyntaxError) reject(null, "valid JSON", error.message);
    throw error;
  }
}

/** The place of a value in an envelope's text as its member names (`shape[0]`), null for the whole text. */
function memberNames(parts) {
  const steps = parts.map((part) =>
    typeof part === "number" ? `[${part}]` : /^[A-Za-z_][A-Za-z0-9_]*$/.test(part) ? `.${part}` : `[${JSON.stringify(part)}]`,
  );
  const path = steps.join("").replace(/^\./, "");
  return path === "" ? null : path;
}

function bitLength(n) {
  return n === 0 ? 0 : 32 - Math.clz32(n);
}

/** §6: the route dtype num_experts fixes; §2 of bitpack-and-frame: the width it fixes. */
function dtypeForExperts(numExperts) {
  if (numExperts <= 256n) return "uint8";
  if (numExperts <= 32768n) return "int16";
  return "int32";
}
function bitsForExperts(numExperts) {
  return Math.max(1, bitLength(Number(numExperts - 1n)));
}

function canonicalDtype(maxId) {
  if (maxId < 256) return "uint8";
  if (maxId < 32768) return "int16";
  return "int32";
}

/** `data[i, j, k]` for flat index `index` of an array of this shape (C order). */
export function position(index, shape, name = "data") {
  const dims = shape.map(Number);
  const idx = new Array(dims.length).fill(0);
  let rest = index;
  for (let axis = dims.length - 1; axis >= 0; axis--) {
    idx[axis] = rest % dims[axis];
    rest = Math.floor(rest / dims[axis]);
  }
  return `${name}[${idx.join(", ")}]`;
}

// §5: the standard alphabet, strict.
const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const SEXTET = new Int16Array(128).fill(-1);
for (let i = 0; i < ALPHABET.length; i++) SEXTET[ALPHABET.charCodeAt(i)] = i;

/** Decode canonical base64 of exactly nbytes bytes (the length was checked before). */
export function decodeBase64(text, nbytes, field = "data") {
  const out = new Uint8Array(nbytes);
  const padding = text.endsWith("==") ? 2 : text.endsWith("=") ? 1 : 0;
  if (padding !== (3 - (nbytes % 3)) % 3) reject(field, `base64 padded to ${nbytes} bytes`, text.slice(-4));
  const body = text.length - padding;
  let acc = 0;
  let bits = 0;
  let o = 0;
  for (let i = 0; i < body; i++) {
    const c = text.charCodeAt(i);
    const v = c < 128 ? SEXTET[c] : -1;
    if (v < 0) reject(field, "standard base64 (A-Z a-z 0-9 + / and = padding)", `${show(text[i])} at ${i}`);
    acc = (acc << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (acc >> bits) & 0xff;
    }
    acc &= (1 << bits) - 1;
  }
  if (acc !== 0) reject(field, "base64 with zero pad bits", text.slice(-4));
  return out;
}

/** Checks 1-2 (§8): members present, none unknown. */
function checkMembers(envelope, required, optional) {
  for (const key of required) {
    if (!Object.hasOwn(envelope, key)) reject(key, "present", undefined);
  }
  const unknown = Object.keys(envelope).filter((k) => !required.includes(k) && !optional.includes(k));
  if (unknown.length > 0) reject(null, `an object with members ${[...required, ...optional].join(", ")}`, unknown);
}

/** Check 3: schema and version. */
function checkSchema(envelope, schema) {
  if (envelope.schema !== schema) reject("schema", JSON.stringify(schema), envelope.schema);
  const version = integerOf(envelope.version);
  if (version === null) reject("version", "an integer", envelope.version);
  if (!SUPPORTED_VERSIONS.includes(version)) {
    throw new DecodeError("version", `one of ${SUPPORTED_VERSIONS.join(", ")}`, show(envelope.version), {
      unsupportedVersion: true,
    });
  }
}

/** Check 5 (§8): shape entries are integers in `minimums[i]` (else 0) .. 2**63-1, then the extent is bounded. */
export function checkShape(shape, { ndim = null, maxNdim = MAX_NDIM, minimums = [], name = "shape" } = {}) {
  if (!Array.isArray(shape)) reject(name, "an array of integers", shape);
  if (ndim !== null && shape.length !== ndim) reject(name, `${ndim} dimensions`, shape);
  if (shape.length > maxNdim) reject(name, `at most ${maxNdim} dimensions`, shape.length);
  const dims = shape.map((entry, i) => {
    const low = BigInt(minimums[i] ?? 0);
    const value = integerOf(entry);
    if (value === null || value < low || value > MAX_DIMENSION) {
      reject(`${name}[${i}]`, `an integer in ${low} .. 2**63 - 1`, entry);
    }
    return value;
  });
  checkExtent(dims, name);
  return dims;
}

/** The product of the non-zero entries: what an element limit applies to, so a zero cannot hide a dimension. */
function extentOf(shape) {
  return shape.reduce((a, b) => (b === 0n ? a : a * b), 1n);
}

function checkExtent(shape, name = "shape") {
  const extent = extentOf(shape);
  if (extent > MAX_EXTENT) reject(name, "dimensions whose non-zero product is at most 2**60 - 1", extent);
}

export function elementCount(shape) {
  return shape.reduce((a, b) => a * b, 1n);
}

/** Check 8: the application's element limit (DEFAULT_MAX_ELEMENTS when it states none), on the extent. */
export function checkLimit(shape, maxElements, name = "shape") {
  const limit = maxElements === null || maxElements === undefined ? DEFAULT_MAX_ELEMENTS : BigInt(maxElements);
  const extent = extentOf(shape);
  if (extent > limit) reject(name, `at most ${limit} elements`, extent);
}

/**
 * The number of characters (code points) in a string: what a JSON string's length is, where `.length` counts
 * UTF-16 units (a character beyond U+FFFF is two of them).
 */
export function charCount(text) {
  if (!/[\uD800-\uDFFF]/.test(text)) return text.length;
  let count = 0;
  for (const _ of text) count++;
  return count;
}

/** Check 7: data is a string of the base64 length of exactly nbytes bytes (nothing decoded yet). */
export function checkDataLength(data, nbytes) {
  if (typeof data !== "string") reject("data", "a base64 string", data);
  const chars = 4n * ((nbytes + 2n) / 3n);
  const length = charCount(data);
  if (BigInt(length) !== chars) reject("data", `${chars} base64 characters`, length);
}

/** Little-endian elements of `dtype` as Numbers (BigInts for 64-bit integers). */
export function readValues(bytes, dtype) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const size = DTYPE_SIZES[dtype];
  const count = bytes.length / size;
  const read = {
    bool: (o) => view.getUint8(o),
    uint8: (o) => view.getUint8(o),
    int8: (o) => view.getInt8(o),
    uint16: (o) => view.getUint16(o, true),
    int16: (o) => view.getInt16(o, true),
    uint32: (o) => view.getUint32(o, true),
    int32: (o) => view.getInt32(o, true),
    uint64: (o) => view.getBigUint64(o, true),
    int64: (o) => view.getBigInt64(o, true),
    float16: (o) => float16(view.getUint16(o, true)),
    float32: (o) => view.getFloat32(o, true),
    float64: (o) => view.getFloat64(o, true),
  }[dtype];
  const values = new Array(count);
  for (let i = 0; i < count; i++) values[i] = read(i * size);
  return values;
}

function float16(bits) {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >> 10) & 0x1f;
  const fraction = bits & 0x3ff;
  if (exponent === 0) return sign * fraction * 2 ** -24;
  if (exponent === 0x1f) return fraction ? NaN : sign * Infinity;
  return sign * (1 + fraction / 1024) * 2 ** (exponent - 15);
}

/** §6a / bitpack §1: ids of `bits` bits, LSB first; pad bits must be zero. */
function unpack(stream, count, bits) {
  const ids = new Array(count);
  for (let i = 0; i < count; i++) {
    let value = 0;
    for (let k = 0; k < bits; k++) {
      const j = i * bits + k;
      if ((stream[j >> 3] >> (j & 7)) & 1) value += 2 ** k;
    }
    ids[i] = value;
  }
  for (let j = count * bits; j < stream.length * 8; j++) {
    if ((stream[j >> 3] >> (j & 7)) & 1) reject("data", "zero pad bits", `bit ${j} set`);
  }
  return ids;
}

/** Unpacked ids as little-endian `dtype` bytes (the bytes the unpacked envelope would carry). */
function toBytes(ids, dtype) {
  const size = DTYPE_SIZES[dtype];
  const bytes = new Uint8Array(ids.length * size);
  for (let i = 0; i < ids.length; i++) {
    for (let b = 0; b < size; b++) bytes[i * size + b] = Math.floor(ids[i] / 2 ** (8 * b)) & 0xff;
  }
  return bytes;
}

/** The routes header: checks 6 (num_experts, bits) after the common ones. Shared by envelope and frame. */
function checkRouteHeader({ dtype, numExperts, readBits, callerExperts }) {
  if (numExperts !== null) {
    if (dtype !== dtypeForExperts(numExperts)) {
      reject("dtype", `${JSON.stringify(dtypeForExperts(numExperts))} (fixed by num_experts=${numExperts})`, dtype);
    }
    if (callerExperts !== null && BigInt(callerExperts) !== numExperts) {
      reject("num_experts", `the caller's ${callerExperts}`, numExperts);
    }
  }
  const bits = readBits();
  if (bits !== null) {
    if (numExperts !== null) {
      const fixed = bitsForExperts(numExperts);
      if (bits !== fixed) reject("bits", `${fixed} (fixed by num_experts=${numExperts})`, bits);
    } else {
      const [low, high] = ROUTE_BITS[dtype];
      if (bits < low || bits > high) reject("bits", `${low} .. ${high} for ${dtype}`, bits);
    }
  }
  return bits;
}

/** Check 10 for routes: ids non-negative and below num_experts; canonical dtype and bits without it. */
function checkIds(ids, shape, { dtype, bits, declared, limit }) {
  // Rule by rule (§8 step 10): a negative id anywhere is named before an out-of-range id earlier in the array.
  const negative = ids.findIndex((id) => id < 0);
  if (negative >= 0) reject(position(negative, shape), "a non-negative expert id", ids[negative]);
  let maxId = 0;
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i];
    if (limit !== null && id >= limit) reject(position(i, shape), `an expert id below ${limit}`, id);
    if (id > maxId) maxId = id;
  }
  if (declared) return;
  const canonical = canonicalDtype(maxId);
  if (dtype !== canonical) reject("dtype", `${JSON.stringify(canonical)}, the smallest holding id ${maxId}`, dtype);
  const width = Math.max(1, bitLength(maxId));
  if (bits !== null && bits !== width) reject("bits", `${width}, the bit length of the largest id ${maxId}`, bits);
}

function finishRoutes({ dtype, shape, bits, numExperts, callerExperts, payload }) {
  const count = Number(elementCount(shape));
  const ids = bits === null ? readValues(payload, dtype) : unpack(payload, count, bits);
  const limits = [numExperts, callerExperts === null ? null : BigInt(callerExperts)].filter((x) => x !== null);
  const limit = limits.length ? Number(limits.reduce((a, b) => (a < b ? a : b))) : null;
  checkIds(ids, shape, { dtype, bits, declared: numExperts !== null, limit });
  return { dtype, shape, bytes: bits === null ? payload : toBytes(ids, dtype), values: ids, numExperts, bits };
}

function optionalInteger(envelope, key, low, high) {
  if (!Object.hasOwn(envelope, key)) return null;
  const value = integerOf(envelope[key]);
  if (value === null || value < low || value > high) reject(key, `an integer in ${low} .. ${high}`, envelope[key]);
  return value;
}

/**
 * Decode an r3wire.routes envelope (version 1, packed or not) or the seed's unversioned {data, shape, dtype};
 * with seedOnly, the seed form alone (SkyRL's format: a `schema` member is then an unknown member).
 * Throws DecodeError.
 */
export function decodeRoutes(input, { numExperts = null, maxElements = null, seedOnly = false } = {}) {
  const envelope = parseInput(input);
  if (!isPlainObject(envelope)) reject(null, "a JSON object", envelope);
  // The seed form is the object with neither `schema` nor `version`; one of them alone is a broken envelope.
  const seed = seedOnly || (!Object.hasOwn(envelope, "schema") && !Object.hasOwn(envelope, "version"));
  if (seed) {
    checkMembers(envelope, ["data", "shape", "dtype"], []);
  } else {
    checkMembers(envelope, ["data", "shape", "dtype", "schema", "version"], ["num_experts", "bits"]);
    checkSchema(envelope, "r3wire.routes");
  }
  const dtype = envelope.dtype;
  if (!ROUTE_DTYPES.includes(dtype)) reject("dtype", `one of ${ROUTE_DTYPES.join(", ")}`, dtype);
  // §6: a routes array has at least one layer and one slot; rows may be 0.
  const shape = checkShape(envelope.shape, { ndim: 3, minimums: [0, 1, 1] });
  const declared = optionalInteger(envelope, "num_experts", 1n, MAX_NUM_EXPERTS);
  const readBits = () => {
    const bits = optionalInteger(envelope, "bits", 1n, 31n);
    return bits === null ? null : Number(bits);
  };
  const bits = checkRouteHeader({ dtype, numExperts: declared, readBits, callerExperts: numExperts });
  const count = elementCount(shape);
  const nbytes = bits === null ? count * BigInt(DTYPE_SIZES[dtype]) : (count * BigInt(bits) + 7n) / 8n;
  checkDataLength(envelope.data, nbytes);
  checkLimit(shape, maxElements);
  const payload = decodeBase64(envelope.data, Number(nbytes));
  return finishRoutes({ dtype, shape, bits, numExperts: declared, callerExperts: numExperts, payload });
}

function decodeGeneric(input, schema, dtypes, maxElements) {
  const envelope = parseInput(input);
  if (!isPlainObject(envelope)) reject(null, "a JSON object", envelope);
  checkMembers(envelope, ["data", "shape", "dtype", "schema", "version"], []);
  checkSchema(envelope, schema);
  const dtype = envelope.dtype;
  if (!dtypes.includes(dtype)) reject("dtype", `one of ${dtypes.join(", ")}`, dtype);
  const shape = checkShape(envelope.shape);
  const nbytes = elementCount(shape) * BigInt(DTYPE_SIZES[dtype]);
  checkDataLength(envelope.data, nbytes);
  checkLimit(shape, maxElements);
  const bytes = decodeBase64(envelope.data, Number(nbytes));
  return { dtype, shape, bytes, values: readValues(bytes, dtype) };
}

/** Decode an r3wire.array envelope. Throws DecodeError. */
export function decodeArray(input, { dtypes = Object.keys(DTYPE_SIZES), maxElements = null } = {}) {
  const result = decodeGeneric(input, "r3wire.array", dtypes, maxElements);
  if (result.dtype === "bool") {
    const bad = result.values.findIndex((v) => v > 1);
    if (bad >= 0) reject(position(bad, result.shape), "0 or 1 (bool)", result.values[bad]);
  }
  return result;
}

/** Decode an r3wire.logprobs envelope: float32/float64, every value finite. Throws DecodeError. */
export function decodeLogprobs(input, { maxElements = null } = {}) {
  const result = decodeGeneric(input, "r3wire.logprobs", LOGPROB_DTYPES, maxElements);
  const bad = result.values.findIndex((v) => !Number.isFinite(v));
  if (bad >= 0) reject(position(bad, result.shape), "a finite logprob", result.values[bad]);
  return result;
}

const FRAME_MAGIC = [0x52, 0x33, 0x57, 0x46]; // "R3WF"
const FRAME_HEADER = 32;
const FRAME_DTYPES = { 1: "uint8", 2: "int16", 3: "int32" };

/** Decode a routes frame (bitpack-and-frame.md §4) from a Uint8Array. Throws DecodeError. */
export function decodeRoutesFrame(frame, { numExperts = null, maxElements = null } = {}) {
  if (frame.length < 4 || FRAME_MAGIC.some((b, i) => frame[i] !== b)) {
    reject("magic", 'the bytes "R3WF"', Array.from(frame.subarray(0, 4), (b) => b.toString(16).padStart(2, "0")).join(""));
  }
  if (frame.length > 4 && frame[4] !== 1) {
    throw new DecodeError("version", "1", String(frame[4]), { unsupportedVersion: true });
  }
  if (frame.length < FRAME_HEADER) reject("header", `${FRAME_HEADER} bytes`, frame.length);
  const view = new DataView(frame.buffer, frame.byteOffset, frame.byteLength);
  const dtype = FRAME_DTYPES[frame[5]];
  if (dtype === undefined) reject("dtype", "code 1, 2 or 3", frame[5]);
  if (frame[7] !== 0) reject("reserved", "0", frame[7]);
  const shape = [view.getBigUint64(8, true), view.getBigUint64(16, true), BigInt(view.getUint32(24, true))];
  // Step 5 as for the envelope: entries in index order (layers and top_k at least 1), then the extent.
  for (const [axis, low] of [[0, 0n], [1, 1n], [2, 1n]]) {
    if (shape[axis] < low || shape[axis] > MAX_DIMENSION) {
      reject(`shape[${axis}]`, `an integer in ${low} .. 2**63 - 1`, shape[axis]);
    }
  }
  checkExtent(shape);
  const declaredRaw = BigInt(view.getUint32(28, true));
  const declared = declaredRaw === 0n ? null : declaredRaw;
  if (declared !== null && declared > MAX_NUM_EXPERTS) reject("num_experts", "at most 2**31", declared);
  const readBits = () => {
    if (frame[6] > 31) reject("bits", "an integer in 0 .. 31", frame[6]);
    return frame[6] === 0 ? null : frame[6];
  };
  const bits = checkRouteHeader({ dtype, numExperts: declared, readBits, callerExperts: numExperts });
  const count = elementCount(shape);
  const nbytes = bits === null ? count * BigInt(DTYPE_SIZES[dtype]) : (count * BigInt(bits) + 7n) / 8n;
  if (BigInt(frame.length) !== BigInt(FRAME_HEADER) + nbytes) {
    reject("data", `${nbytes} bytes after the header`, frame.length - FRAME_HEADER);
  }
  checkLimit(shape, maxElements);
  const payload = frame.slice(FRAME_HEADER);
  return finishRoutes({ dtype, shape, bits, numExperts: declared, callerExperts: numExperts, payload });
}
