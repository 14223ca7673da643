// Whole engine responses: the routes fields of a response body, each read in the format its value is in, with
// the token ids and logprobs beside it (one logprob per token id). Written from docs/formats.md ("Whole responses", "Detection") alone.
//
//   readResponse(body, {numLayers, topK, numExperts, maxElements, dtype})
//     -> [{path, format, dtype, shape, values, start, mask, numExperts, tokenIds, promptTokenIds, logprobs, numClamped}]
//
// `body` is JSON text or a value from parseJson. Fireworks' zstd payloads (r3/v1 and the trace object holding
// one) throw NeedsZstd: Node has no zstd decoder without a package.

import { JsonNumber } from "./json.mjs";
import {
  finish,
  readFireworksMatrices,
  readJsonLists,
  readNemoRl,
  readPrimeRl,
  readPrimeRlB85,
  readSglang,
  readVllmNpy,
} from "./formats.mjs";
import {
  DecodeError,
  charCount,
  checkShape,
  decodeArray,
  decodeLogprobs,
  decodeRoutes,
  elementCount,
  integerOf,
  isPlainObject,
  parseInput,
  reject,
  show,
} from "./r3wire.mjs";

export class NeedsZstd extends Error {}

const ROUTE_KEYS = new Set(["routed_experts", "router_replay", "routing_matrices"]);
// Per-token keys whose values are not searched for routes (formats.md, "Where").
const NOT_SEARCHED = new Set([
  "token_ids",
  "output_ids",
  "prompt_token_ids",
  "prompt_ids",
  "completion_ids",
  "logprobs",
  "top_logprobs",
  "prompt_logprobs",
  "input_token_logprobs",
  "output_token_logprobs",
  "input_top_logprobs",
  "output_top_logprobs",
]);
const TOKEN_KEYS = ["token_ids", "output_ids"];
const PROMPT_KEYS = ["prompt_token_ids"];
// formats.md, "The routes fit the call": where the rows of a format whose payload states their start end, as how many
// tokens short of the call's n (prime-rl: n - 1 - start rows; a Fireworks SUFFIX, read as the positions before the
// tokens its matrices produced, too).
const STATED_START_ENDS = { "prime-rl": [1n], "fireworks-r3v1": [1n], "fireworks-trace": [1n] };
const INT64_MAX = (1n << 63n) - 1n;
const LOGPROB_KEYS = ["logprobs", "output_token_logprobs"];
// What a missing or non-finite sampled logprob becomes (docs/logprobs.md: clamp_logprobs).
const LOGPROB_FLOOR = -9999.0;

const ROUTED_EXPERTS = "routed_experts";
const ROUTED_EXPERTS_DTYPE = "routed_experts_dtype";
const PRIME_DTYPES = ["uint8", "uint16", "int16", "int32"];
const SKYRL_DTYPES = ["uint8", "int16", "int32"];
const READERS = {
  // Every format's result is held to the caller's num_layers / top_k (formats.md, "The caller's model").
  r3wire: finish((v, o) => decodeRoutes(v, o)),
  skyrl: finish((v, o) => decodeRoutes(v, { ...o, seedOnly: true })),
  "prime-rl": readPrimeRl,
  "prime-rl-b85": readPrimeRlB85,
  sglang: readSglang,
  "vllm-npy": readVllmNpy,
  "nemo-rl": readNemoRl,
  "json-lists": readJsonLists,
  "fireworks-matrices": readFireworksMatrices,
  "fireworks-r3v1": null,
  "fireworks-trace": null,
};

// formats.md, "Detection": a string's first characters after leading whitespace say its format.
const textHead = (text) => text.slice(0, 64).trimStart();
const isJsonText = (text) => /^[{[]/.test(textHead(text));

const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/** The bytes of the first 8 base64 characters (for a skippable zstd frame's magic), or none. */
function base64Head(text) {
  const chunk = text.slice(0, 8);
  if (chunk.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(chunk)) return [];
  const bits = [...chunk.replace(/=+$/, "")].map((c) => ALPHABET.indexOf(c).toString(2).padStart(6, "0")).join("");
  return Array.from({ length: Math.floor(bits.length / 8) }, (_, i) => parseInt(bits.slice(8 * i, 8 * i + 8), 2));
}

/** The format of a string by its prefix; SGLang's only with a shape (`hasShape` null: never a guess). */
function detectText(text, hasShape) {
  const start = textHead(text);
  if (start.startsWith("nrlre1:")) return "nemo-rl";
  if (start.startsWith("k05VTVBZ")) return "vllm-npy";
  const head = base64Head(start);
  // A skippable zstd frame: magic 0x184D2A5? little-endian.
  const skippable =
    head.length >= 4 && (head[0] & 0xf0) === 0x50 && head[1] === 0x2a && head[2] === 0x4d && head[3] === 0x18;
  if (start.startsWith("KLUv/") || skippable) return "fireworks-r3v1";
  return hasShape ? "sglang" : null;
}

/** A list by its first item that is not null: strings (or only nulls) are per-token matrices, lists are ids. */
function detectList(value) {
  const first = value.find((item) => item !== null) ?? null;
  if (typeof first === "string" || (value.length > 0 && first === null)) return "fireworks-matrices";
  if (Array.isArray(first)) return "json-lists";
  if (isPlainObject(first)) reject(null, "a routes value (a list of objects is a batch of responses)", value);
  return reject(null, "nested lists of expert ids or base64 matrices and nulls (an empty list is either)", value);
}

/**
 * An object by its keys. `nested`: it is itself a routes value, and this is the field naming a routed_experts member
 * of it (refused: formats.md, "Which format"), else null. Returns [format, value].
 */
function detectObject(value, hasShape, nested) {
  const has = (k) => Object.hasOwn(value, k);
  if (has("schema") || has("version")) return ["r3wire", value]; // its reader refuses a routed_experts member
  if (has("manifest")) return ["fireworks-trace", value];
  if (has(ROUTED_EXPERTS)) {
    if (nested !== null) reject(nested, "absent: a routes value holds the routes itself", Object.keys(value));
    return detectHeld(value, hasShape);
  }
  if (has("data") && has("shape")) {
    if (has("start")) return ["prime-rl", value];
    if (has("dtype")) {
      const dtype = value.dtype;
      const prime = typeof dtype === "string" && PRIME_DTYPES.includes(dtype) && !SKYRL_DTYPES.includes(dtype);
      return [prime ? "prime-rl" : "skyrl", value];
    }
    let count = null;
    try {
      count = elementCount(checkShape(value.shape, { ndim: 3 }));
    } catch (error) {
      if (!(error instanceof DecodeError)) throw error;
    }
    const b85 = count !== null && count > 0n && typeof value.data === "string" && BigInt(charCount(value.data)) === 5n * count;
    return [b85 ? "prime-rl-b85" : "prime-rl", value];
  }
  return reject(null, "a known routed-experts object (r3wire, skyrl, prime-rl, fireworks-trace)", Object.keys(value));
}

/**
 * The format of `holder.routed_experts`, by the value itself; a bare string without a known prefix is SGLang's,
 * read with the holder so routed_experts_dtype beside it counts.
 */
function detectHeld(holder, hasShape) {
  const value = holder[ROUTED_EXPERTS];
  const unknown =
    "recognisable: an object, nested lists, or a string starting nrlre1:, k05VTVBZ or KLUv/ " +
    "(SGLang's bare base64 also needs num_layers and top_k)";
  if (value === null) reject(ROUTED_EXPERTS, "a routes value", null);
  if (isPlainObject(value)) return detectObject(value, hasShape, `${ROUTED_EXPERTS}.${ROUTED_EXPERTS}`);
  if (Array.isArray(value)) return [detectList(value), value];
  if (typeof value === "string") {
    if (isJsonText(value)) reject(ROUTED_EXPERTS, "a routes value, not JSON text inside a string", value.slice(0, 12));
    const format = detectText(value, null);
    if (format !== null) return [format, value];
    if (hasShape) return ["sglang", holder];
    reject(ROUTED_EXPERTS, unknown, "neither");
  }
  return reject(ROUTED_EXPERTS, unknown, value);
}

/** Detection (formats.md) of a value: [format, the value to hand its reader]; `nested` as for detectObject. */
function detect(payload, hasShape, nested) {
  if (isPlainObject(payload)) return detectObject(payload, hasShape, nested);
  if (Array.isArray(payload)) return [detectList(payload), payload];
  if (typeof payload !== "string") reject(null, "a routed-experts payload (a string, a list or an object)", payload);
  if (isJsonText(payload)) {
    const parsed = parseInput(payload);
    if (!isPlainObject(parsed) && !Array.isArray(parsed)) reject(null, "a JSON object or array", parsed);
    return detect(parsed, hasShape, nested);
  }
  const format = detectText(payload, hasShape);
  if (format === null) {
    reject(null, "a recognisable format (bare base64 is SGLang's: pass num_layers and top_k)", payload.slice(0, 12));
  }
  return [format, payload];
}

// A key written `.key` in a JSONPath; any other as a JSON string, `["a b"]` (formats.md, "Errors").
const IDENTIFIER = /^[\p{XID_Start}_]\p{XID_Continue}*$/u;
const MAX_KEY = 64;
const MAX_PARTS = 32;

/** One key of a JSONPath; in an error (not `exact`) a key over 64 characters is cut, its length said. */
function keyStep(key, exact = false) {
  const chars = [...key];
  if (!exact && chars.length > MAX_KEY) {
    return `[${JSON.stringify(`${chars.slice(0, MAX_KEY - 3).join("")}...`)} (${chars.length} characters)]`;
  }
  return IDENTIFIER.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`;
}

/**
 * Fireworks' per-token `logprobs.content[j].routing_matrix` is not read (formats.md, "Where"): where its rows start
 * depends on `echo`, which the body does not say. Refused at the first entry carrying one, never read as no routes.
 */
function refuseTokenRouting(logprobs, parts) {
  if (!isPlainObject(logprobs) || !Array.isArray(logprobs.content)) return;
  const at = logprobs.content.findIndex((entry) => isPlainObject(entry) && Object.hasOwn(entry, "routing_matrix"));
  if (at < 0) return;
  throw new DecodeError(
    jsonPath([...parts, "content", at, "routing_matrix"]),
    "absent (Fireworks' per-token routing_matrix: read them as fireworks-matrices, placed by echo)",
    "a routing matrix",
  );
}

/** The JSONPath of `parts` (keys and list indices); in an error a path over 32 parts keeps its first and last 16. */
function jsonPath(parts, exact = false) {
  let shown = parts;
  if (!exact && parts.length > MAX_PARTS) {
    const half = MAX_PARTS / 2;
    shown = [...parts.slice(0, half), { elided: parts.length - 2 * half }, ...parts.slice(-half)];
  }
  const steps = shown.map((part) =>
    typeof part === "number" ? `[${part}]` : typeof part === "string" ? keyStep(part, exact) : `...(${part.elided} more)`,
  );
  return `$${steps.join("")}`;
}

// What format readers call the routes array they decode from a value: a field with only this name is the value.
const DECODED_NAMES = new Set(["routes", "data", "matrix"]);

/**
 * formats.md, "Errors": a reader's error placed at the JSONPath of the routes value at `path`. Members of an object
 * value stay; the SGLang and vLLM readers' own name `routed_experts` is the value itself (`wrapped`: the value was
 * read as the routed_experts member of its holder, whose routed_experts_dtype is the holder's member); an index
 * into the value or the array it decodes to follows the path; any other part of an encoded string, with its own
 * index, and a member an object value lacks, are said in the message: `(its npy header.shape[1])`, `(its data)`.
 */
function placed(error, parts, value, wrapped) {
  const path = jsonPath(parts);
  let field = error.field ?? "";
  const moved = (where, f, expected = error.expected) => {
    const located = f === null || f === "" ? where : f.startsWith("[") ? `${where}${f}` : `${where}.${f}`;
    return new DecodeError(located, expected, error.got, { unsupportedVersion: error.unsupportedVersion });
  };
  if (wrapped && field.startsWith(ROUTED_EXPERTS_DTYPE)) return moved(jsonPath(parts.slice(0, -1)), field);
  if ((wrapped || !isPlainObject(value)) && field.startsWith(ROUTED_EXPERTS)) field = field.slice(ROUTED_EXPERTS.length);
  if (error.unsupportedVersion) return moved(path, error.field);
  const bracket = field.indexOf("[");
  let head = (bracket < 0 ? field : field.slice(0, bracket)).replace(/^\.+|\.+$/g, "");
  const index = bracket < 0 ? "" : field.slice(bracket);
  const dot = head.indexOf(".");
  const member = dot < 0 ? head : head.slice(0, dot);
  let where = path;
  let inside = !isPlainObject(value); // what the reader names is inside an encoded string
  if (!inside && Object.hasOwn(value, member)) {
    if (typeof value[member] !== "string") return moved(path, head + index); // a member holding JSON: a real path
    where = jsonPath([...parts, member]); // a string member (data): what follows is inside the string
    head = dot < 0 ? "" : head.slice(dot + 1);
    inside = true;
  }
  // A member an object value lacks is named (data too); the decoded array's own name inside a string is not.
  if (head !== "" && (!DECODED_NAMES.has(head) || !inside)) {
    return moved(where, null, `${error.expected} (its ${head}${index})`);
  }
  return moved(where, index);
}


/** Run `fn`, naming any DecodeError's field under the JSONPath `path` (null: the value at `path` itself). */
function at(path, fn) {
  try {
    return fn();
  } catch (error) {
    if (!(error instanceof DecodeError)) throw error;
    const field = error.field;
    const where = field === null ? path : field.startsWith("[") ? `${path}${field}` : `${path}.${field}`;
    throw new DecodeError(where, error.expected, error.got);
  }
}

/** Token ids (completion and prompt alike): a list of integers in 0 .. 2**63 - 1, at most maxElements of them, or
 * an r3wire.array of them (a dumps body); fields relative to the list. In a list the first bad id is named. */
function tokenIds(value, maxElements) {
  if (isPlainObject(value) && value.schema === "r3wire.array") {
    const array = decodeArray(value, { maxElements: maxElements ?? null });
    if (!/^u?int/.test(array.dtype) || array.shape.length !== 1) {
      reject(null, "a 1-d integer array", `${array.dtype} [${array.shape}]`);
    }
    const ids = array.values.map((v) => BigInt(v));
    if (ids.some((id) => id < 0n || id > INT64_MAX)) reject(null, "token ids in 0..2**63-1", "an id out of range");
    return ids;
  }
  if (!Array.isArray(value)) reject(null, "a list of token ids", value);
  if (maxElements !== undefined && maxElements !== null && BigInt(value.length) > BigInt(maxElements)) {
    reject(null, `at most max_elements=${maxElements} token ids`, value.length);
  }
  return value.map((x, i) => {
    if (!(x instanceof JsonNumber && x.isInteger())) reject(`[${i}]`, "a token id (an integer)", x);
    if (x.toBigInt() < 0n || x.toBigInt() > INT64_MAX) reject(`[${i}]`, "a token id in 0..2**63-1", x);
    return x.toBigInt();
  });
}

/** One logprob of a list or an entry, as a Number; null for a missing one; `field` names a value that is neither
 * a number nor null. An integer must be exactly a float64 (2**63 - 1 is not). */
function logprobOf(x, field) {
  if (x === null) return null;
  if (x instanceof JsonNumber) {
    if (!x.isInteger()) return x.toNumber();
    // An integer is its exact value (`-0` is 0, not -0.0), if a float64 holds it.
    const v = Number(x.toBigInt());
    if (BigInt(v) !== x.toBigInt()) reject(field, "a number exactly representable as a float64", x);
    return v;
  }
  return reject(field, "a number or null", x);
}

/** Clamped (formats.md, "Beside the routes"): {values, missing}, a missing or non-finite value -> `floor`. */
function clamped(raw, floor = LOGPROB_FLOOR) {
  const missing = raw.map((v) => !(typeof v === "number" && Number.isFinite(v)));
  return { values: raw.map((v, i) => (missing[i] ? floor : v)), missing };
}

/** An envelope's array of logprobs: one per token, so 1-d. */
function oneD(array) {
  if (array.shape.length !== 1) reject(null, "a 1-d array of sampled logprobs (one per token)", `shape [${array.shape}]`);
  return array.values;
}

/**
 * Sampled logprobs in any of the shapes formats.md lists, clamped (missing, NaN, ±inf -> -9999.0): the values,
 * which of them were clamped, and the key of the list read inside the value (".content", ".token_logprobs" or "").
 * An object in none of those shapes ({}, {"content": null}, {"top_logprobs": ...}) is null: no logprobs here.
 */
function logprobs(key, value, maxElements) {
  if (key === "output_token_logprobs") {
    if (!Array.isArray(value)) reject(null, "a list of [logprob, token_id, text] entries", value);
    const raw = value.map((entry, i) => {
      if (!Array.isArray(entry) || entry.length === 0) reject(`[${i}]`, "a [logprob, token_id, ...] list", entry);
      return entry[0];
    });
    // An entry's logprob is named [i][0], as its token id is [i][1] (the one logprob value rule, logprobs.md).
    return { ...clamped(raw.map((x, i) => logprobOf(x, `[${i}][0]`))), prefix: "" };
  }
  if (Array.isArray(value)) return { ...clamped(value.map((x, i) => logprobOf(x, `[${i}]`))), prefix: "" };
  if (!isPlainObject(value)) reject(null, "a logprobs object or list", value);
  if (value.schema === "r3wire.logprobs") {
    return { ...clamped(oneD(decodeLogprobs(value, { maxElements: maxElements ?? null }))), prefix: "" };
  }
  if (value.schema === "r3wire.array") {
    // An older dumps body's logprobs: any float dtype; float16 has no -9999.0, its nearest is -10000.0.
    const array = decodeArray(value, { maxElements: maxElements ?? null });
    if (!array.dtype.startsWith("float")) reject(null, "a float array of logprobs", array.dtype);
    return { ...clamped(oneD(array), array.dtype === "float16" ? -10000.0 : LOGPROB_FLOOR), prefix: "" };
  }
  if (Object.hasOwn(value, "content") && value.content !== null) {
    if (!Array.isArray(value.content)) reject("content", "an array of entries", value.content);
    // Every entry's type is checked before the count (formats.md, "One logprob per token id").
    const raw = value.content.map((entry, i) => {
      if (entry === null) return null;
      if (!isPlainObject(entry)) reject(`content[${i}]`, 'an object {"logprob": ...} or null', entry);
      const x = Object.hasOwn(entry, "logprob") ? entry.logprob : null;
      if (x !== null && !(x instanceof JsonNumber)) reject(`content[${i}].logprob`, "a number or null", x);
      return logprobOf(x, `content[${i}].logprob`);
    });
    return { ...clamped(raw), prefix: ".content" };
  }
  if (Object.hasOwn(value, "token_logprobs") && value.token_logprobs !== null) {
    if (!Array.isArray(value.token_logprobs)) {
      reject("token_logprobs", "a list of numbers and nulls", value.token_logprobs);
    }
    const raw = value.token_logprobs.map((x, i) => logprobOf(x, `token_logprobs[${i}]`));
    return { ...clamped(raw), prefix: ".token_logprobs" };
  }
  return null;
}

/** The nearest sampled logprobs in `chain` (nearest object first, `logprobs` before `output_token_logprobs`); an
 * object in no known shape is skipped as absent. [[key, value, path], read] or null. */
function nearLogprobs(chain, paths, maxElements) {
  for (let i = chain.length - 1; i >= 0; i--) {
    for (const key of LOGPROB_KEYS) {
      if (!Object.hasOwn(chain[i], key) || chain[i][key] === null) continue;
      const where = jsonPath([...paths[i], key]);
      const read = at(where, () => logprobs(key, chain[i][key], maxElements));
      if (read !== null) return [[key, chain[i][key], where], read];
    }
  }
  return null;
}

/**
 * formats.md, "Beside the routes": one logprob per token id. An echo (vLLM completions) holds the logprobs of the
 * prompt_token_ids beside the token ids first: those are left out. SGLang's [logprob, token_id, text] entries
 * must name the token id they pair with, where they name one. Returns {values, clamped}.
 */
function aligned(ids, idsRaw, lp, sampled, prompt, promptRaw) {
  const count = ids.length;
  const total = sampled.values.length;
  const where = `${lp[2]}${sampled.prefix}`;
  let skip = 0;
  if (total !== count) {
    // Only a prompt in the token ids' own object is echoed (vLLM completions); a chat response's is not, and only
    // a `logprobs` value holds an echo: SGLang's output_token_logprobs never does (SGLang has no echo).
    const echoes = lp[0] === "logprobs" && prompt !== null && promptRaw[3] === idsRaw[3];
    const echoed = echoes ? prompt : null;
    if (echoed === null || total !== echoed.length + count) {
      const echo = echoed === null ? "" : `, or ${echoed.length} + ${count} with the echoed prompt_token_ids`;
      throw new DecodeError(where, `one logprob per token id (${count} at ${idsRaw[2]}${echo})`, `${total} logprobs`);
    }
    skip = echoed.length;
  }
  if (lp[0] === "output_token_logprobs") {
    for (let i = 0; i < count; i++) {
      const entry = lp[1][skip + i];
      if (entry.length < 2 || entry[1] === null) continue;
      const given = entry[1];
      const want = ids[i];
      if (!(given instanceof JsonNumber && given.isInteger() && given.toBigInt() === want)) {
        throw new DecodeError(`${where}[${skip + i}][1]`, `the token id at ${idsRaw[2]}[${i}] (${want})`, show(given));
      }
    }
  }
  return { values: sampled.values.slice(skip), clamped: sampled.missing.slice(skip).filter(Boolean).length };
}

/** The first of `keys` (non-null) in the objects of `chain`, nearest first: [key, value, its path, the object]. */
function beside(chain, paths, keys) {
  for (let i = chain.length - 1; i >= 0; i--) {
    for (const key of keys) {
      if (Object.hasOwn(chain[i], key) && chain[i][key] !== null) {
        return [key, chain[i][key], jsonPath([...paths[i], key]), chain[i]];
      }
    }
  }
  return null;
}

/** Read every routes field of a response body, in document order. Throws DecodeError (field = JSONPath). */
export function readResponse(input, options = {}) {
  const body = parseInput(input, jsonPath);
  // formats.md, "Whole responses": JSON text holding a scalar is no body, never read as one without routes.
  if (!isPlainObject(body) && !Array.isArray(body)) reject("$", "a JSON object or array (a response body)", body);
  // formats.md, "Where": a list is a batch of bodies, each an object; text or any other item is refused.
  if (Array.isArray(body)) {
    body.forEach((item, i) => {
      if (!isPlainObject(item)) {
        reject(`$[${i}]`, "a response body as a JSON object", item);
      }
    });
  }
  const results = [];
  // `outer`: the objects around the list holding the enclosing list item (a chat response around its choices).
  const hasShape = options.numLayers != null && options.topK != null;
  // `key`: the routes key the value is under (null for an r3wire.routes envelope under another key); `holder`: the
  // object holding it (null for an envelope at the root or in a list).
  const read = (value, parts, key, holder, chain, paths, outer) => {
    const path = jsonPath(parts);
    // A routed_experts value is read with the routed_experts_dtype beside it (SGLang); any other by itself.
    const wrapped = key === ROUTED_EXPERTS && holder !== null;
    const kept = [ROUTED_EXPERTS, ROUTED_EXPERTS_DTYPE].filter((k) => Object.hasOwn(holder ?? {}, k));
    const payload = wrapped ? Object.fromEntries(kept.map((k) => [k, holder[k]])) : value;
    let format;
    let result;
    try {
      // A routed_experts value is read with its holder; any other routes value is one itself, never a holder.
      const [name, target] = detect(payload, hasShape, wrapped ? null : ROUTED_EXPERTS);
      format = name;
      const reader = READERS[format];
      if (reader === null) throw new NeedsZstd(`${path}: ${format} is zstd-compressed`);
      result = reader(target, { ...options, dtype: format === "sglang" ? options.dtype : undefined });
    } catch (error) {
      throw error instanceof DecodeError ? placed(error, parts, value, wrapped) : error;
    }
    const ids = beside(chain, paths, TOKEN_KEYS);
    const promptRaw = beside(chain, paths, PROMPT_KEYS) ?? beside(outer.chain, outer.paths, PROMPT_KEYS);
    const tokens = ids === null ? null : at(ids[2], () => tokenIds(ids[1], options.maxElements));
    const prompt = promptRaw === null ? null : at(promptRaw[2], () => tokenIds(promptRaw[1], options.maxElements));
    const [lp, near] = nearLogprobs(chain, paths, options.maxElements) ?? [null, null];
    const sampled =
      near === null
        ? null
        : tokens === null
          ? { values: near.values, clamped: near.missing.filter(Boolean).length }
          : aligned(tokens, ids, lp, near, prompt, promptRaw);
    if (tokens !== null && prompt !== null) {
      // formats.md, "The call's token ids": start + rows <= len(prompt) + len(completion).
      const first = result.start ?? 0n;
      const rows = BigInt(result.shape[0]);
      const count = BigInt(prompt.length + tokens.length);
      if (BigInt(first) + rows > count) {
        throw new DecodeError(path, `rows that fit the call: start + rows <= ${count} tokens`, `${rows} rows from ${first}`);
      }
      // A start the payload states (prime-rl; Fireworks SUFFIX) puts the rows' end where that format's rows end:
      // the call's last forwarded token, n - 1.
      const ends = result.start === null || result.start === undefined ? undefined : STATED_START_ENDS[format];
      if (ends !== undefined && !ends.some((short) => BigInt(first) + rows === count - short)) {
        const allowed = ends.map((short) => count - short).join(" or ");
        throw new DecodeError(path, `rows that end at the call's last forwarded token: start + rows = ${allowed}`, `${rows} rows from ${first}`);
      }
    }
    // formats.md, "sglang": the counts SGLang's meta_info states beside its routes bound them the same way (read
    // only when both are non-negative integers).
    const counts = holder === null ? [] : [holder.prompt_tokens, holder.completion_tokens].map(integerOf);
    if (counts.length === 2 && counts.every((n) => n !== null && n >= 0n)) {
      const first = BigInt(result.start ?? 0n);
      if (first + BigInt(result.shape[0]) > counts[0] + counts[1]) {
        throw new DecodeError(path, `rows that fit the stated counts: start + rows <= ${counts[0] + counts[1]} tokens`, `${result.shape[0]} rows from ${first}`);
      }
    }
    results.push({
      ...result,
      path: jsonPath(parts, true),
      format,
      tokenIds: tokens,
      promptTokenIds: prompt,
      logprobs: sampled === null ? null : sampled.values,
      numClamped: sampled === null ? 0 : sampled.clamped,
    });
  };
  // `chain`: the objects from the enclosing list item (or the root) down to this one; `paths`: their paths (parts).
  const walk = (node, parts, chain, paths, outer) => {
    if (Array.isArray(node)) {
      const shared = chain.length > 0 ? { chain, paths } : outer;
      node.forEach((item, i) => walk(item, [...parts, i], [], [], shared));
      return;
    }
    if (!isPlainObject(node)) return;
    const here = [...chain, node];
    const herePaths = [...paths, parts];
    if (node.schema === "r3wire.routes") {
      // An envelope under a key that is not a routes key, or the body itself: still routes (formats.md, "Where").
      read(node, parts, null, chain.length > 0 ? chain[chain.length - 1] : null, chain, paths, outer);
      return;
    }
    for (const key of Object.keys(node)) {
      const child = [...parts, key];
      if (key === "logprobs") refuseTokenRouting(node[key], child);
      if (ROUTE_KEYS.has(key)) {
        if (node[key] !== null) read(node[key], child, key, node, here, herePaths, outer);
      } else if (!NOT_SEARCHED.has(key)) {
        walk(node[key], child, here, herePaths, outer);
      }
    }
  };
  walk(body, [], [], [], { chain: [], paths: [] });
  return results;
}
