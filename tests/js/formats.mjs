// Readers for other engines' routed-experts formats, written from docs/formats.md alone (not from r3wire's
// Python source): prime-rl's {data, shape, start, dtype} and its older base85 {data, shape}, NeMo-RL's
// `nrlre1:` strings, SGLang's bare base64 (the caller gives layers and top_k), vLLM's base64 `.npy` files,
// nested JSON lists and Fireworks' per-token matrices. Fireworks' r3/v1 payloads (and the trace object holding
// one) are zstd-compressed, which Node has no dependency-free decoder for: not here.
//
// Every reader takes the payload (a value from parseJson, or JSON text where the format is an object or a
// list) and options {numLayers, topK, dtype, numExperts, maxElements}; it returns {dtype, shape: BigInt[],
// values: Number[] | BigInt[] (flat, C order), start} or throws DecodeError.

import { JsonNumber } from "./json.mjs";
import {
  DTYPE_SIZES,
  DecodeError,
  charCount,
  checkDataLength,
  checkLimit,
  checkShape,
  decodeBase64,
  elementCount,
  integerOf,
  isPlainObject,
  parseInput,
  position,
  readValues,
  reject,
  show,
} from "./r3wire.mjs";

/**
 * Ids must be non-negative, then (a second pass, as wire-format.md §8 step 10 orders the rules) below numExperts;
 * `sentinel` says where -1 means "no route": "slot" (SGLang), "row" (NeMo-RL: all top_k slots -1), or "none".
 */
function checkIds(values, shape, name, { numExperts = null, sentinel = "none" } = {}) {
  const topK = Number(shape[2] ?? 1n);
  for (let i = 0; i < values.length; i++) {
    const id = Number(values[i]);
    if (id >= 0) continue;
    if (sentinel === "slot" && id === -1) continue;
    if (sentinel === "row" && id === -1) {
      // A (token, layer) whose top_k slots are ALL -1 is a missing route; a partly negative row is corrupt.
      const start = i - (i % topK);
      if (values.slice(start, start + topK).every((v) => Number(v) === -1)) continue;
    }
    reject(position(i, shape, name), "a non-negative expert id", id);
  }
  if (numExperts === null) return;
  const bad = values.findIndex((v) => Number(v) >= Number(numExperts));
  if (bad >= 0) reject(position(bad, shape, name), `an expert id below ${numExperts}`, values[bad]);
}

/** Strict base64 whose byte count is not known in advance (SGLang, .npy): length, then decoding. */
function decodeBase64Any(text, field) {
  if (typeof text !== "string") reject(field, "a base64 string", text);
  if (charCount(text) % 4 !== 0) reject(field, "base64 of a length divisible by 4", charCount(text));
  const padding = text.endsWith("==") ? 2 : text.endsWith("=") ? 1 : 0;
  return decodeBase64(text, (text.length / 4) * 3 - padding, field);
}

function checkMembers(payload, required, optional) {
  if (!isPlainObject(payload)) reject(null, `an object with members ${required.join(", ")}`, payload);
  for (const key of required) if (!Object.hasOwn(payload, key)) reject(key, "present", undefined);
  const unknown = Object.keys(payload).filter((k) => !required.includes(k) && !optional.includes(k));
  if (unknown.length > 0) reject(null, `an object with members ${[...required, ...optional].join(", ")}`, unknown);
}

/**
 * What every format's result must satisfy, checked after the format's own rules (formats.md, "Rules every reader
 * follows"): at least one layer and one slot (`shape[1]`, `shape[2]`), then the caller's model (`shape`).
 */
export function finish(read) {
  return (input, options = {}) => {
    const result = read(input, options);
    for (const axis of [1, 2]) {
      if (result.shape[axis] === 0n) reject(`shape[${axis}]`, "an integer in 1 .. 2**63 - 1", 0);
    }
    const { numLayers = null, topK = null } = options;
    if (numLayers !== null && BigInt(numLayers) !== result.shape[1]) reject("shape", `${numLayers} layers`, result.shape);
    if (topK !== null && BigInt(topK) !== result.shape[2]) reject("shape", `top_k ${topK}`, result.shape);
    return result;
  };
}

const PRIME_DTYPES = ["uint8", "uint16", "int16", "int32"];
const MAX_START = 2n ** 63n - 1n;

/** prime-rl {data, shape, start, dtype}: dtype absent = uint8, start absent or null = 0. */
export const readPrimeRl = finish(function readPrimeRl(input, options = {}) {
  const payload = parseInput(input);
  checkMembers(payload, ["data", "shape"], ["start", "dtype"]);
  // Absent means uint8 (older prime-rl); null is not absent.
  const dtype = Object.hasOwn(payload, "dtype") ? payload.dtype : "uint8";
  if (!PRIME_DTYPES.includes(dtype)) reject("dtype", `one of ${PRIME_DTYPES.join(", ")}`, payload.dtype);
  const shape = checkShape(payload.shape, { ndim: 3 });
  let start = 0n;
  if (payload.start !== undefined && payload.start !== null) {
    start = integerOf(payload.start);
    if (start === null || start < 0n || start > MAX_START) reject("start", "an integer in 0 .. 2**63 - 1", payload.start);
  }
  if (typeof payload.data !== "string") reject("data", "a base64 string", payload.data);
  checkLimit(shape, options.maxElements);
  const nbytes = elementCount(shape) * BigInt(DTYPE_SIZES[dtype]);
  checkDataLength(payload.data, nbytes);
  const values = readValues(decodeBase64(payload.data, Number(nbytes)), dtype);
  checkIds(values, shape, "data", options);
  return { dtype, shape, values, start };
});

// RFC 1924 (Python's base64.b85encode), not Ascii85.
const B85 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~";
const B85_DIGIT = new Map(Array.from(B85, (c, i) => [c, i]));

/** prime-rl's older {data: base85, shape}: little-endian int32 ids, 5 characters each. */
export const readPrimeRlB85 = finish(function readPrimeRlB85(input, options = {}) {
  const payload = parseInput(input);
  checkMembers(payload, ["data", "shape"], []);
  const shape = checkShape(payload.shape, { ndim: 3 });
  const count = elementCount(shape);
  checkLimit(shape, options.maxElements);
  if (typeof payload.data !== "string") reject("data", "a base85 string", payload.data);
  if (BigInt(charCount(payload.data)) !== 5n * count) reject("data", `${5n * count} base85 characters`, charCount(payload.data));
  const bytes = new Uint8Array(Number(count) * 4);
  const view = new DataView(bytes.buffer);
  for (let g = 0; g < Number(count); g++) {
    let value = 0;
    for (let k = 0; k < 5; k++) {
      const c = payload.data[g * 5 + k];
      const digit = B85_DIGIT.get(c);
      if (digit === undefined) reject("data", "base85 (RFC 1924 alphabet)", `${show(c)} at ${g * 5 + k}`);
      value = value * 85 + digit;
    }
    if (value > 0xffffffff) reject("data", "5-character groups of at most 2**32 - 1", payload.data.slice(g * 5, g * 5 + 5));
    view.setUint32(g * 4, value, false); // each group is 4 bytes, most significant first
  }
  const values = readValues(bytes, "int32");
  checkIds(values, shape, "data", options);
  return { dtype: "int32", shape, values, start: null };
});

const NEMO_DTYPES = ["int8", "int16", "int32"];
const DECIMAL = /^(0|[1-9][0-9]*)$/;

/** NeMo-RL `nrlre1:<dtype>:<S>x<L>x<K>:<base64>`; all -1 (token, layer) rows are kept as missing routes. */
export const readNemoRl = finish(function readNemoRl(input, options = {}) {
  if (typeof input !== "string") reject(null, "an nrlre1:<dtype>:<S>x<L>x<K>:<base64> string", input);
  // The magic first; then four parts, the base64 being everything after the third ':'.
  const magic = input.split(":", 1)[0];
  if (magic !== "nrlre1") reject("magic", '"nrlre1"', magic);
  const parts = input.split(":");
  if (parts.length < 4) reject(null, "nrlre1:<dtype>:<S>x<L>x<K>:<base64>", `${parts.length} ':'-separated parts`);
  const [, dtype, dims] = parts;
  const data = parts.slice(3).join(":");
  if (!NEMO_DTYPES.includes(dtype)) reject("dtype", `one of ${NEMO_DTYPES.join(", ")}`, dtype);
  const entries = dims.split("x");
  if (entries.length !== 3 || !entries.every((d) => DECIMAL.test(d))) {
    reject("shape", "three plain decimal dimensions SxLxK", dims);
  }
  const shape = checkShape(entries.map((d) => new JsonNumber(d)), { ndim: 3 });
  checkLimit(shape, options.maxElements);
  const nbytes = elementCount(shape) * BigInt(DTYPE_SIZES[dtype]);
  checkDataLength(data, nbytes);
  const values = readValues(decodeBase64(data, Number(nbytes)), dtype);
  checkIds(values, shape, "data", { ...options, sentinel: "row" });
  return { dtype, shape, values, start: null };
});

const SGLANG_DTYPES = ["int32", "uint16", "uint8"];

/** SGLang bare base64 (dtype from options, default int32), or a mapping {routed_experts, routed_experts_dtype}. */
export const readSglang = finish(function readSglang(input, options = {}) {
  const { numLayers = null, topK = null } = options;
  if (numLayers === null || topK === null) reject("num_layers, top_k", "given (SGLang's bare base64 carries no shape)", null);
  let text = input;
  let dtype = options.dtype ?? null;
  if (isPlainObject(input)) {
    if (!Object.hasOwn(input, "routed_experts")) reject("routed_experts", "present", undefined);
    text = input.routed_experts;
    if (typeof text !== "string") reject("routed_experts", "a base64 string", text);
    const named = input.routed_experts_dtype ?? null;
    if (named !== null) {
      if (!SGLANG_DTYPES.includes(named)) reject("routed_experts_dtype", `one of ${SGLANG_DTYPES.join(", ")}`, named);
      if (dtype !== null && dtype !== named) reject("routed_experts_dtype", `the caller's ${dtype}`, named);
      dtype = named;
    }
  }
  dtype ??= "int32";
  if (!SGLANG_DTYPES.includes(dtype)) reject("routed_experts_dtype", `one of ${SGLANG_DTYPES.join(", ")}`, dtype);
  if (typeof text !== "string") reject("routed_experts", "a base64 string", text);
  const rowBytes = BigInt(numLayers) * BigInt(topK) * BigInt(DTYPE_SIZES[dtype]);
  // The byte count follows from the text's length and padding: whole rows and the limit before decoding.
  if (charCount(text) % 4 !== 0) reject("routed_experts", "base64 of a length divisible by 4", charCount(text));
  // The padding is the '=' among the last two characters; a misplaced one is refused by the decoding below.
  const padding = [...text.slice(-2)].filter((ch) => ch === "=").length;
  const claimed = BigInt((charCount(text) / 4) * 3 - padding);
  if (claimed % rowBytes !== 0n) reject("routed_experts", `whole rows of ${rowBytes} bytes`, `${claimed} bytes`);
  const shape = [claimed / rowBytes, BigInt(numLayers), BigInt(topK)];
  checkLimit(shape, options.maxElements);
  const bytes = decodeBase64Any(text, "routed_experts");
  const values = readValues(bytes, dtype);
  checkIds(values, shape, "routed_experts", { ...options, sentinel: "slot" });
  return { dtype, shape, values, start: null };
});

/** Nested JSON lists [rows][layers][top_k] of integers: int32 when every id fits, else int64. */
export const readJsonLists = finish(function readJsonLists(input, options = {}) {
  const payload = parseInput(input);
  if (!Array.isArray(payload)) reject(null, "a list of [layers][top_k] lists of expert ids", payload);
  // The shape is the first item's length at each level; an item that should be a list is named by its path.
  const dims = [];
  let node = payload;
  for (let level = 0; level < 3; level++) {
    if (!Array.isArray(node)) reject(`routes${"[0]".repeat(level)}`, "a list (routes nest [rows][layers][top_k])", node);
    dims.push(BigInt(node.length));
    if (node.length === 0) break;
    node = node[0];
  }
  while (dims.length < 3) dims.push(0n);
  if (payload.length === 0) {
    if (options.numLayers == null || options.topK == null) {
      reject(null, "a non-empty list, or num_layers and top_k to shape an empty one", "[]");
    }
    dims[1] = BigInt(options.numLayers);
    dims[2] = BigInt(options.topK);
  } else if (dims[1] === 0n || dims[2] === 0n) {
    reject("shape", "[rows, layers >= 1, top_k >= 1]", dims);
  }
  const shape = dims;
  checkLimit(shape, options.maxElements);
  let level = payload;
  for (const width of [shape[1], shape[2]]) {
    if (!level.every((item) => Array.isArray(item) && BigInt(item.length) === width)) {
      reject("routes", `a regular [rows][layers][top_k] nesting of lists of ${width}`, "a ragged or mixed list");
    }
    level = level.flat();
  }
  const ids = level.map((x) => {
    const id = integerOf(x);
    if (id === null) reject("routes", "integers (expert ids)", x);
    if (id < -(2n ** 63n) || id >= 2n ** 63n) reject("routes", "expert ids in the int64 range", x);
    return id;
  });
  const int32 = ids.every((id) => id >= -(2n ** 31n) && id < 2n ** 31n);
  const values = int32 ? ids.map(Number) : ids;
  checkIds(values, shape, "routes", { ...options, sentinel: "row" });
  return { dtype: int32 ? "int32" : "int64", shape, values, start: null };
});

/**
 * Fireworks per-token matrices (rLLM / tinker `routing_matrices`): per token, null or "" (not replayed) or the
 * standard base64 of its little-endian [layers, top_k] uint8 or uint16 matrix. Those rows are zero and false in
 * `mask`.
 */
export const readFireworksMatrices = finish(function readFireworksMatrices(input, options = {}) {
  const { numLayers = null, topK = null } = options;
  if (numLayers === null || topK === null) reject("num_layers, top_k", "given (Fireworks matrices carry no shape)", null);
  const payload = parseInput(input);
  if (!Array.isArray(payload)) reject(null, "a list of base64 matrices or null", payload);
  const perMatrix = BigInt(numLayers) * BigInt(topK);
  const shape = [BigInt(payload.length), BigInt(numLayers), BigInt(topK)];
  checkLimit(shape, options.maxElements);
  // Every entry's type and length first (the length less the '=' among its last two characters), then decoding.
  let dtype = null;
  const absent = (entry) => entry === null || entry === "";
  payload.forEach((entry, i) => {
    if (absent(entry)) return;
    if (typeof entry !== "string") reject(`[${i}]`, "a base64 string or null", entry);
    if (charCount(entry) % 4 !== 0) reject(`[${i}]`, "base64 of a length divisible by 4", charCount(entry));
    const nbytes = BigInt((charCount(entry) / 4) * 3 - [...entry.slice(-2)].filter((ch) => ch === "=").length);
    const width = nbytes === perMatrix ? "uint8" : nbytes === 2n * perMatrix ? "uint16" : undefined;
    if (width === undefined || (dtype !== null && width !== dtype)) {
      const want = dtype === null ? `${perMatrix} (uint8) or ${2n * perMatrix} (uint16)` : `${dtype} matrix bytes`;
      reject(`[${i}]`, want, `${nbytes} bytes`);
    }
    dtype = width;
  });
  const matrices = payload.map((entry, i) =>
    absent(entry) ? null : decodeBase64(entry, Number(perMatrix) * DTYPE_SIZES[dtype], `[${i}]`),
  );
  // Without any matrix there is no width to read: uint8, the narrower one.
  dtype ??= "uint8";
  // Concatenated, not spread into push(): a long list would exceed the engine's argument limit.
  const values = [];
  for (const bytes of matrices) {
    const matrix = bytes === null ? new Array(Number(perMatrix)).fill(0) : readValues(bytes, dtype);
    for (const v of matrix) values.push(v);
  }
  checkIds(values, shape, "routes", options);
  const mask = matrices.some((m) => m === null) ? matrices.map((m) => m !== null) : null;
  return { dtype, shape, values, start: null, mask };
});

// ---- vLLM: base64 of a complete .npy file (NEP 1), parsed without any code execution.

const NPY_MAGIC = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]; // \x93NUMPY
const NPY_MAX_HEADER = 10000;
const MAX_LITERAL_DEPTH = 32;
const NPY_DESCR = {
  "|u1": "uint8",
  "|i1": "int8",
  "<u2": "uint16",
  ">u2": "uint16",
  "<i2": "int16",
  ">i2": "int16",
  "<u4": "uint32",
  ">u4": "uint32",
  "<i4": "int32",
  ">i4": "int32",
  "<u8": "uint64",
  ">u8": "uint64",
  "<i8": "int64",
  ">i8": "int64",
};

/**
 * A Python literal of the subset np.save writes: dicts, tuples, lists, strings without escapes, integers,
 * True/False/None. Anything else (escapes, floats, expressions) is refused as `npy header`.
 */
function parsePythonLiteral(text) {
  let pos = 0;
  const fail = () => reject("npy header", "a Python literal dict", text);
  const space = () => {
    while (pos < text.length && " \t\n\r\f".includes(text[pos])) pos++; // Python: form feed is whitespace
  };
  let depth = 0;
  const value = () => {
    space();
    const c = text[pos];
    if (c === "'" || c === '"') {
      const end = text.indexOf(c, pos + 1);
      if (end < 0 || text.slice(pos + 1, end).includes("\\")) fail();
      const s = text.slice(pos + 1, end);
      pos = end + 1;
      return s;
    }
    if (c === "{" || c === "(" || c === "[") {
      // np.save nests one level; a deep header is hostile, and unbounded recursion would overflow the stack.
      if (++depth > MAX_LITERAL_DEPTH) fail();
      const close = { "{": "}", "(": ")", "[": "]" }[c];
      pos++;
      const items = [];
      const entries = [];
      let trailingComma = false;
      for (;;) {
        space();
        if (text[pos] === close) {
          pos++;
          break;
        }
        const item = value();
        if (c === "{") {
          space();
          if (text[pos] !== ":") fail();
          pos++;
          if (typeof item !== "string") fail();
          entries.push([item, value()]);
        } else {
          items.push(item);
        }
        space();
        trailingComma = text[pos] === ",";
        if (trailingComma) pos++;
        else if (text[pos] !== close) fail();
      }
      depth--;
      // A repeated key keeps its last value, as Python's literal evaluation (and numpy's reader) does.
      if (c === "{") return { dict: new Map(entries) };
      // (x) is not a tuple; (x,) is.
      if (c === "(" && items.length === 1 && !trailingComma) return items[0];
      return c === "(" ? { tuple: items } : { list: items };
    }
    const match = /^-?[0-9]+/.exec(text.slice(pos));
    if (match !== null) {
      pos += match[0].length;
      return BigInt(match[0]);
    }
    for (const [word, v] of [
      ["True", true],
      ["False", false],
      ["None", null],
    ]) {
      if (text.startsWith(word, pos)) {
        pos += word.length;
        return v;
      }
    }
    return fail();
  };
  const result = value();
  space();
  if (pos !== text.length) fail();
  return result;
}

/** vLLM `choices[i].routed_experts`: base64 of an np.save file, or a mapping holding it under routed_experts. */
export const readVllmNpy = finish(function readVllmNpy(input, options = {}) {
  let text = input;
  if (isPlainObject(input)) text = input.routed_experts;
  if (typeof text !== "string") reject("routed_experts", "a base64 .npy string", text);
  if (charCount(text) % 4 !== 0) reject("routed_experts", "base64 of a length divisible by 4", charCount(text));
  // The file's byte count follows from the text's length and padding; each step decodes only the bytes it needs,
  // after checking the file holds them (formats.md, vllm-npy steps 1-3): magic and version, the preamble with the
  // header length, then the whole declared header, before the header is parsed.
  const total = (charCount(text) / 4) * 3 - [...text.slice(-2)].filter((ch) => ch === "=").length;
  const head = (nbytes) => {
    if (nbytes > total) reject("routed_experts", `a .npy file of at least ${nbytes} bytes`, `${total} bytes`);
    return decodeBase64Any(text.slice(0, Math.min(text.length, 4 * Math.ceil(nbytes / 3))), "routed_experts");
  };
  const start = head(8);
  if (NPY_MAGIC.some((b, i) => start[i] !== b)) {
    reject("npy magic", "the bytes \\x93NUMPY", Array.from(start.slice(0, 6), (b) => b.toString(16)).join(""));
  }
  const major = start[6];
  if (![1, 2, 3].includes(major) || start[7] !== 0) reject("npy version", "1.0, 2.0 or 3.0", `${major}.${start[7]}`);
  const lengthSize = major === 1 ? 2 : 4;
  const preamble = head(8 + lengthSize);
  const view = new DataView(preamble.buffer, preamble.byteOffset, preamble.byteLength);
  const headerLength = major === 1 ? view.getUint16(8, true) : view.getUint32(8, true);
  if (headerLength > NPY_MAX_HEADER) reject("npy header length", `at most ${NPY_MAX_HEADER} bytes`, headerLength);
  const dataStart = 8 + lengthSize + headerLength;
  const headBytes = head(dataStart).slice(8 + lengthSize, dataStart);
  let headerText;
  try {
    headerText = major === 3 ? new TextDecoder("utf-8", { fatal: true }).decode(headBytes) : String.fromCharCode(...headBytes);
  } catch (error) {
    if (!(error instanceof TypeError)) throw error;
    reject("npy header", "UTF-8 text", "invalid UTF-8");
  }
  const header = parsePythonLiteral(headerText);
  const keys = header?.dict ? [...header.dict.keys()].sort() : null;
  if (keys === null || keys.join(",") !== "descr,fortran_order,shape") {
    reject("npy header", "a dict with exactly descr, fortran_order, shape", headerText);
  }
  const descr = header.dict.get("descr");
  const dtype = typeof descr === "string" ? NPY_DESCR[descr] : undefined;
  if (dtype === undefined) reject("npy header.descr", "an integer descr (|u1 |i1 <u2 ... >i8)", descr);
  const fortran = header.dict.get("fortran_order");
  if (typeof fortran !== "boolean") reject("npy header.fortran_order", "True or False", fortran);
  const rawShape = header.dict.get("shape");
  if (!rawShape?.tuple) reject("npy header.shape", "a tuple of integers", headerText);
  const shape = checkShape(
    rawShape.tuple.map((d) => (typeof d === "bigint" ? d : null)),
    { ndim: 3, name: "npy header.shape" },
  );
  const size = DTYPE_SIZES[dtype];
  checkLimit(shape, options.maxElements, "npy header.shape");
  const fileBytes = BigInt(dataStart) + elementCount(shape) * BigInt(size);
  // The padding tells the exact byte count: a trailing byte can hide in the same number of characters.
  if (BigInt(total) !== fileBytes) reject("routed_experts", `a .npy file of ${fileBytes} bytes`, `${total} bytes`);
  const file = decodeBase64(text, Number(fileBytes), "routed_experts");
  let body = file.slice(dataStart);
  if (descr[0] === ">") {
    for (let i = 0; i < body.length; i += size) body.subarray(i, i + size).reverse();
  }
  let values = readValues(body, dtype);
  if (fortran) {
    // Fortran order: the first index varies fastest. Re-lay the values in C order.
    const [s0, s1, s2] = shape.map(Number);
    const c = new Array(values.length);
    for (let i = 0; i < s0; i++)
      for (let j = 0; j < s1; j++) for (let k = 0; k < s2; k++) c[(i * s1 + j) * s2 + k] = values[i + s0 * (j + s1 * k)];
    values = c;
  }
  checkIds(values, shape, "routed_experts", options);
  return { dtype, shape, values, start: null };
});

export { DecodeError };
