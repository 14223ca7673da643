// Whole engine responses: the routes fields of a response body, each read in the format its value is in, with
// the token ids and logprobs beside it (one logprob per token id). Written from docs/formats.md ("Whole responses", "Detection") alone.
//
//   readResponse(body, {numLayers, topK, numExperts, maxElements})
//     -> [{path, format, dtype, shape, values, start, mask, numExperts, tokenIds, promptTokenIds, logprobs, numClamped}]
//
// `body` is JSON text or a value from parseJson. Fireworks' zstd payloads (r3/v1 and the trace object holding
// one) throw NeedsZstd: Node has no zstd decoder without a package.

import { JsonNumber } from "./json.mjs";
import {
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
  checkShape,
  decodeLogprobs,
  decodeRoutes,
  elementCount,
  isPlainObject,
  parseInput,
  reject,
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
const INT64_MAX = (1n << 63n) - 1n;
const LOGPROB_KEYS = ["logprobs", "output_token_logprobs"];
// What a missing or non-finite sampled logprob becomes (docs/logprobs.md: clamp_logprobs).
const LOGPROB_FLOOR = -9999.0;

/** Detection (formats.md): the format of one routes value, and the reader for it. */
function detect(value, holder) {
  if (isPlainObject(value)) {
    const has = (k) => Object.hasOwn(value, k);
    if (has("schema") || has("version")) return ["r3wire", (v, o) => decodeRoutes(v, o)];
    if (has("manifest")) return ["fireworks-trace", null];
    if (has("data") && has("shape") && has("start")) return ["prime-rl", readPrimeRl];
    if (has("data") && has("shape") && has("dtype")) {
      return value.dtype === "uint16" ? ["prime-rl", readPrimeRl] : ["skyrl", (v, o) => decodeRoutes(v, { ...o, seedOnly: true })];
    }
    if (has("data") && has("shape")) {
      let count = null;
      try {
        count = elementCount(checkShape(value.shape, { ndim: 3 }));
      } catch (error) {
        if (!(error instanceof DecodeError)) throw error;
      }
      const b85 = count !== null && count > 0n && typeof value.data === "string" && BigInt(value.data.length) === 5n * count;
      return b85 ? ["prime-rl-b85", readPrimeRlB85] : ["prime-rl", readPrimeRl];
    }
    reject(null, "a routes payload of a known format", Object.keys(value));
  }
  if (Array.isArray(value)) {
    if (value.length === 0) reject(null, "a non-empty list (name the format)", value);
    if (value.every((item) => Array.isArray(item))) return ["json-lists", readJsonLists];
    if (value.every((item) => item === null || typeof item === "string")) {
      return ["fireworks-matrices", readFireworksMatrices];
    }
    reject(null, "a list of lists, or of base64 strings and nulls", value);
  }
  if (typeof value === "string") {
    if (value.startsWith("nrlre1:")) return ["nemo-rl", readNemoRl];
    if (value.startsWith("k05VTVBZ")) return ["vllm-npy", readVllmNpy];
    if (value.startsWith("KLUv/")) return ["fireworks-r3v1", null];
    // SGLang's bare string, read with the routed_experts_dtype beside it (the holder is SGLang's meta_info).
    const dtype = holder.routed_experts_dtype ?? null;
    return ["sglang", (v, o) => readSglang({ routed_experts: v, routed_experts_dtype: dtype }, o)];
  }
  return reject(null, "a routes payload (object, list or string)", value);
}

const number = (x) => (x instanceof JsonNumber ? x.toNumber() : x);

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

/** Token ids (completion and prompt alike): a list of integers in 0 .. 2**63 - 1, at most maxElements of them
 * (fields relative to the list). */
function tokenIds(value, maxElements) {
  if (!Array.isArray(value)) reject(null, "a list of integers", value);
  if (maxElements !== undefined && BigInt(value.length) > BigInt(maxElements)) {
    reject(null, `at most max_elements=${maxElements} token ids`, value.length);
  }
  return value.map((x, i) => {
    const ok = x instanceof JsonNumber && x.isInteger() && x.toBigInt() >= 0n && x.toBigInt() <= INT64_MAX;
    if (!ok) reject(`[${i}]`, "a token id in 0..2**63-1", x);
    return x.toBigInt();
  });
}

/**
 * Sampled logprobs in any of the shapes formats.md lists, clamped (missing, NaN, ±inf -> -9999.0): the values,
 * which of them were clamped, and the key of the list read inside the value (".content", ".token_logprobs" or "").
 */
function logprobs(key, value) {
  let raw;
  let prefix = "";
  if (key === "output_token_logprobs") {
    if (!Array.isArray(value)) reject(null, "a list of [logprob, token_id, text] entries", value);
    raw = value.map((entry, i) => {
      if (!Array.isArray(entry) || entry.length === 0) reject(`[${i}]`, "a [logprob, token_id, text] entry", entry);
      return entry[0];
    });
  } else if (Array.isArray(value)) {
    raw = value;
  } else if (isPlainObject(value) && value.schema === "r3wire.logprobs") {
    raw = decodeLogprobs(value).values;
  } else if (isPlainObject(value) && Object.hasOwn(value, "content")) {
    if (!Array.isArray(value.content)) reject("content", "a list of {logprob} entries", value.content);
    raw = value.content.map((entry) => (isPlainObject(entry) ? (entry.logprob ?? null) : entry));
    prefix = ".content";
    value.content.forEach((entry, i) => {
      const v = isPlainObject(entry) ? (entry.logprob ?? null) : null;
      if (v !== null && !(v instanceof JsonNumber)) reject(`content[${i}].logprob`, "a number or null", v);
    });
  } else if (isPlainObject(value) && Object.hasOwn(value, "token_logprobs")) {
    if (!Array.isArray(value.token_logprobs)) reject("token_logprobs", "a list of numbers", value.token_logprobs);
    raw = value.token_logprobs;
    prefix = ".token_logprobs";
  } else {
    reject(null, "logprobs in a known shape", value);
  }
  const missing = [];
  const values = raw.map((x, i) => {
    const v = number(x);
    missing.push(!(typeof v === "number" && Number.isFinite(v)));
    if (typeof v === "number" && Number.isFinite(v)) return v;
    if (v !== null && typeof v !== "number") reject(`${prefix.slice(1)}[${i}]`.replace(/^\[/, "["), "a number or null", x);
    return LOGPROB_FLOOR;
  });
  return { values, missing, prefix };
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
    // Only a prompt in the token ids' own object is echoed (vLLM completions); a chat response's is not.
    const echoed = prompt !== null && promptRaw[3] === idsRaw[3] ? prompt : null;
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
        throw new DecodeError(`${where}[${skip + i}][1]`, `the token id at ${idsRaw[2]}[${i}] (${want})`, String(given));
      }
    }
  }
  return { values: sampled.values.slice(skip), clamped: sampled.missing.slice(skip).filter(Boolean).length };
}

/** The first of `keys` (non-null) in the objects of `chain`, nearest first: [key, value, path of the object]. */
function beside(chain, paths, keys) {
  for (let i = chain.length - 1; i >= 0; i--) {
    for (const key of keys) {
      if (Object.hasOwn(chain[i], key) && chain[i][key] !== null) {
        return [key, chain[i][key], `${paths[i]}.${key}`, chain[i]];
      }
    }
  }
  return null;
}

/** Read every routes field of a response body, in document order. Throws DecodeError (field = JSONPath). */
export function readResponse(input, options = {}) {
  const body = parseInput(input);
  // formats.md, "Where": a list is a batch of bodies, each an object; text or any other item is refused.
  if (Array.isArray(body)) {
    body.forEach((item, i) => {
      if (!isPlainObject(item)) {
        throw new DecodeError(`$[${i}]`, "a response body as a JSON object", typeof item);
      }
    });
  }
  const results = [];
  // `outer`: the objects around the list holding the enclosing list item (a chat response around its choices).
  const read = (value, path, holder, chain, paths, outer) => {
    const [format, reader] = at(path, () => detect(value, holder));
    if (reader === null) throw new NeedsZstd(`${path}: ${format} is zstd-compressed`);
    // SGLang's reader names the members of its holder (routed_experts, routed_experts_dtype): relocate from there.
    const base = format === "sglang" ? path.slice(0, path.lastIndexOf(".")) : path;
    const result = at(base, () => reader(value, options));
    const ids = beside(chain, paths, TOKEN_KEYS);
    const promptRaw = beside(chain, paths, PROMPT_KEYS) ?? beside(outer.chain, outer.paths, PROMPT_KEYS);
    const lp = beside(chain, paths, LOGPROB_KEYS);
    const tokens = ids === null ? null : at(ids[2], () => tokenIds(ids[1], options.maxElements));
    const prompt = promptRaw === null ? null : at(promptRaw[2], () => tokenIds(promptRaw[1], options.maxElements));
    const read = lp === null ? null : at(lp[2], () => logprobs(lp[0], lp[1]));
    const sampled =
      read === null
        ? null
        : tokens === null
          ? { values: read.values, clamped: read.missing.filter(Boolean).length }
          : aligned(tokens, ids, lp, read, prompt, promptRaw);
    if (tokens !== null && prompt !== null) {
      // formats.md, "The call's token ids": start + rows <= len(prompt) + len(completion).
      const first = result.start ?? 0n;
      const rows = BigInt(result.shape[0]);
      const count = BigInt(prompt.length + tokens.length);
      if (BigInt(first) + rows > count) {
        throw new DecodeError(path, `rows that fit the call: start + rows <= ${count} tokens`, `${rows} rows from ${first}`);
      }
    }
    results.push({
      ...result,
      path,
      format,
      tokenIds: tokens,
      promptTokenIds: prompt,
      logprobs: sampled === null ? null : sampled.values,
      numClamped: sampled === null ? 0 : sampled.clamped,
    });
  };
  // `chain`: the objects from the enclosing list item (or the root) down to this one; `paths`: their JSONPaths.
  const walk = (node, path, chain, paths, outer) => {
    if (Array.isArray(node)) {
      const shared = chain.length > 0 ? { chain, paths } : outer;
      node.forEach((item, i) => walk(item, `${path}[${i}]`, [], [], shared));
      return;
    }
    if (!isPlainObject(node)) return;
    const here = [...chain, node];
    const herePaths = [...paths, path];
    if (node.schema === "r3wire.routes") {
      // An envelope under a key that is not a routes key, or the body itself: still routes (formats.md, "Where").
      const nested = chain.length > 0;
      read(node, path, nested ? chain[chain.length - 1] : node, nested ? chain : here, nested ? paths : herePaths, outer);
      return;
    }
    for (const key of Object.keys(node)) {
      const child = `${path}.${key}`;
      if (ROUTE_KEYS.has(key)) {
        if (node[key] !== null) read(node[key], child, node, here, herePaths, outer);
      } else if (!NOT_SEARCHED.has(key)) {
        walk(node[key], child, here, herePaths, outer);
      }
    }
  };
  walk(body, "$", [], [], { chain: [], paths: [] });
  return results;
}
