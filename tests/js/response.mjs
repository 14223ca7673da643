// Whole engine responses: the routes fields of a response body, each read in the format its value is in, with
// the token ids and logprobs beside it. Written from docs/formats.md ("Whole responses", "Detection") alone.
//
//   readResponse(body, {numLayers, topK, numExperts, maxElements})
//     -> [{path, format, dtype, shape, values, start, mask, numExperts, tokenIds, logprobs, numClamped}]
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
const TOKEN_KEYS = ["token_ids", "output_ids"];
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

/** Token ids: a list of integers. */
function tokenIds(value) {
  if (!Array.isArray(value)) reject("token_ids", "a list of integers", value);
  return value.map((x, i) => {
    if (!(x instanceof JsonNumber) || !x.isInteger()) reject(`token_ids[${i}]`, "an integer", x);
    return Number(x.toBigInt());
  });
}

/** Sampled logprobs in any of the shapes formats.md lists, clamped (missing, NaN, ±inf -> -9999.0). */
function logprobs(key, value) {
  let raw;
  if (key === "output_token_logprobs") raw = value.map((entry) => (Array.isArray(entry) ? entry[0] : null));
  else if (Array.isArray(value)) raw = value;
  else if (isPlainObject(value) && value.schema === "r3wire.logprobs") raw = decodeLogprobs(value).values;
  else if (isPlainObject(value) && Array.isArray(value.content)) {
    raw = value.content.map((entry) => (isPlainObject(entry) ? entry.logprob : null));
  } else if (isPlainObject(value) && Array.isArray(value.token_logprobs)) raw = value.token_logprobs;
  else reject(key, "logprobs in a known shape", value);
  let clamped = 0;
  const values = raw.map((x) => {
    const v = number(x);
    if (typeof v === "number" && Number.isFinite(v)) return v;
    if (v !== null && v !== undefined && typeof v !== "number") reject(key, "numbers or null", x);
    clamped++;
    return LOGPROB_FLOOR;
  });
  return { values, clamped };
}

/** The first of `keys` (non-null) in the objects of `chain`, nearest first. */
function beside(chain, keys) {
  for (let i = chain.length - 1; i >= 0; i--) {
    for (const key of keys) {
      if (Object.hasOwn(chain[i], key) && chain[i][key] !== null) return [key, chain[i][key]];
    }
  }
  return null;
}

/** Read every routes field of a response body, in document order. Throws DecodeError (field = JSONPath). */
export function readResponse(input, options = {}) {
  const body = parseInput(input);
  const results = [];
  const read = (value, path, holder, chain) => {
    const [format, reader] = detect(value, holder);
    if (reader === null) throw new NeedsZstd(`${path}: ${format} is zstd-compressed`);
    let result;
    try {
      result = reader(value, options);
    } catch (error) {
      if (error instanceof DecodeError) {
        throw new DecodeError(error.field === null ? path : `${path}.${error.field}`, error.expected, error.got);
      }
      throw error;
    }
    const ids = beside(chain, TOKEN_KEYS);
    const lp = beside(chain, LOGPROB_KEYS);
    const sampled = lp === null ? null : logprobs(lp[0], lp[1]);
    results.push({
      ...result,
      path,
      format,
      tokenIds: ids === null ? null : tokenIds(ids[1]),
      logprobs: sampled === null ? null : sampled.values,
      numClamped: sampled === null ? 0 : sampled.clamped,
    });
  };
  // `chain`: the objects from the enclosing list item (or the root) down to this one.
  const walk = (node, path, chain) => {
    if (Array.isArray(node)) {
      node.forEach((item, i) => walk(item, `${path}[${i}]`, []));
      return;
    }
    if (!isPlainObject(node)) return;
    const here = [...chain, node];
    if (node.schema === "r3wire.routes") {
      // An envelope under a key that is not a routes key, or the body itself: still routes (formats.md, "Where").
      read(node, path, chain.length > 0 ? chain[chain.length - 1] : node, chain.length > 0 ? chain : here);
      return;
    }
    for (const key of Object.keys(node)) {
      const child = `${path}.${key}`;
      if (ROUTE_KEYS.has(key)) {
        if (node[key] !== null) read(node[key], child, node, here);
      } else {
        walk(node[key], child, here);
      }
    }
  };
  walk(body, "$", []);
  return results;
}
