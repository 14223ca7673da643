// Run the JavaScript reference decoder (r3wire.mjs, formats.mjs, response.mjs) over r3wire's golden vectors in tests/vectors/.
//
//   node tests/js/run_vectors.mjs [vector files...]     (default: every tests/vectors/*.json)
//
// A file is recognised by its top-level `schema` and `version` (r3wire.routes, r3wire.array, r3wire.logprobs,
// r3wire.routes-frame, r3wire.hostile, version 1), so new vector files of r3wire's own formats are picked up
// without a change here, or by its top-level `format` (another engine's: skyrl, prime-rl, prime-rl-b85, nemo-rl,
// sglang, vllm-npy, json-lists, fireworks-matrices), or, for whole engine responses (response.mjs), by a top-level
// `cases` list. Fireworks' zstd formats (no zstd in Node without a package), a response holding one, and unknown
// kinds or versions are skipped with a note. Every `valid` case must decode to its
// values; every `reject` case must be rejected naming its `field`. A case carrying an input key or reader
// argument this runner does not know, or superseded by a newer file (`supersedes`), is counted as skipped, not
// guessed at. Prints `N passed, M failed, K skipped`; exit status 1 on any failure.

import { readdirSync, readFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { JsonNumber, parseJson } from "./json.mjs";
import {
  readFireworksMatrices,
  readJsonLists,
  readNemoRl,
  readPrimeRl,
  readPrimeRlB85,
  readSglang,
  readVllmNpy,
} from "./formats.mjs";
import { NeedsZstd, readResponse } from "./response.mjs";
import { DecodeError, decodeArray, decodeLogprobs, decodeRoutes, decodeRoutesFrame } from "./r3wire.mjs";

const VECTORS = join(dirname(fileURLToPath(import.meta.url)), "..", "vectors");

// Keys a case may hold that do not change how it is decoded.
const DESCRIPTIVE = new Set([
  "name",
  "note",
  "field",
  "values",
  "bytes_hex",
  "legacy",
  "shape",
  "dtype",
  "pack_bits",
  "start",
  "detected_as",
  "mask",
]);
// Keys that select the decoder of a case (hostile-v1.json names one per case).
const SELECTORS = new Set(["decoder"]);
// In other engines' format files: how r3wire writes the case, which a decoder does not need.
const WRITER_KEYS = new Set(["write_args", "exact_write"]);
// Keys passed to the decoder, by their name in the vectors (in a case, or in its read_args).
const OPTIONS = { num_experts: "numExperts", max_elements: "maxElements" };
const READ_ARGS = { ...OPTIONS, num_layers: "numLayers", top_k: "topK", dtype: "dtype" };
// Other engines' formats that need what a dependency-free decoder cannot have (zstd), or a whole-response walk.
const NOT_HERE = {
  "format:fireworks-r3v1": "Fireworks r3/v1 is zstd-compressed, and Node has no zstd without an npm package",
  "format:fireworks-trace": "Fireworks trace payloads are zstd-compressed r3/v1, and Node has no zstd without an npm package",
};

const num = (x) => (x instanceof JsonNumber ? x.toNumber() : x);
// Caller options keep their exact value: an integer token becomes a BigInt (2**60 - 1 is not a safe Number).
const option = (x) => (x instanceof JsonNumber && x.isInteger() ? x.toBigInt() : num(x));
const flat = (values) => (Array.isArray(values) ? values.flatMap(flat) : [num(values)]);
const hex = (bytes) => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
const fromHex = (text) => Uint8Array.from(text.match(/../g) ?? [], (h) => parseInt(h, 16));
const sameShape = (shape, expected) =>
  shape.length === expected.length && shape.every((d, i) => d === BigInt(option(expected[i])));
const sameValues = (values, expected) =>
  values.length === expected.length && values.every((v, i) => Object.is(Number(v), expected[i]));

function check(condition, message) {
  if (!condition) throw new Error(message);
}

const HOSTILE_DECODERS = {
  routes: decodeRoutes,
  array: decodeArray,
  logprobs: decodeLogprobs,
  frame: decodeRoutesFrame,
};

/** Another engine's format (docs/formats.md): its reader, and what a valid case must give. */
function formatKind(read) {
  return {
    input: ["payload"],
    readArgs: true,
    decode: (payload, options) => read(payload, options),
    valid(result, c) {
      check(result.dtype === c.dtype, `dtype ${result.dtype}, expected ${c.dtype}`);
      check(sameShape(result.shape, c.shape), `shape ${result.shape}`);
      check(sameValues(result.values, flat(c.values)), `values ${result.values.slice(0, 16)}`);
      if (c.start !== undefined) check(result.start === BigInt(option(c.start)), `start ${result.start}`);
      if (c.mask !== undefined) check(JSON.stringify(result.mask) === JSON.stringify(c.mask), `mask ${result.mask}`);
    },
  };
}

// The kinds of vector file this decoder implements, by (schema, version). Each: the input of a case and how
// to decode it; then what a valid case must satisfy.
const KINDS = {
  "r3wire.routes/1": {
    input: ["envelope", "text"],
    decode: (payload, options) => decodeRoutes(payload, options),
    valid(result, c, envelope) {
      check(result.dtype === envelope.dtype, `dtype ${result.dtype}, expected ${envelope.dtype}`);
      check(sameShape(result.shape, envelope.shape), `shape ${result.shape}`);
      check(sameValues(result.values, flat(c.values)), `values ${result.values.slice(0, 16)}`);
      if (c.bytes_hex !== undefined && envelope.bits === undefined) check(hex(result.bytes) === c.bytes_hex, "bytes");
    },
  },
  "r3wire.array/1": {
    input: ["envelope", "text"],
    decode: (payload, options) => decodeArray(payload, options),
    valid(result, c, envelope) {
      check(result.dtype === envelope.dtype, `dtype ${result.dtype}`);
      check(sameShape(result.shape, envelope.shape), `shape ${result.shape}`);
      check(hex(result.bytes) === c.bytes_hex, `bytes ${hex(result.bytes)}`);
      if (c.values !== undefined) check(sameValues(result.values, flat(c.values)), `values ${result.values}`);
    },
  },
  "r3wire.logprobs/1": {
    input: ["envelope", "text"],
    decode: (payload, options) => decodeLogprobs(payload, options),
    valid(result, c, envelope) {
      check(result.dtype === envelope.dtype, `dtype ${result.dtype}`);
      check(sameShape(result.shape, envelope.shape), `shape ${result.shape}`);
      check(hex(result.bytes) === c.bytes_hex, `bytes ${hex(result.bytes)}`);
      check(sameValues(result.values, flat(c.values)), `values ${result.values}`);
    },
  },
  // SkyRL's format is the seed envelope alone (docs/formats.md); the other engines' formats are out of scope.
  "format:skyrl": {
    input: ["payload"],
    decode: (payload, options) => decodeRoutes(payload, { ...options, seedOnly: true }),
    valid(result, c) {
      check(result.dtype === c.dtype, `dtype ${result.dtype}, expected ${c.dtype}`);
      check(sameShape(result.shape, c.shape), `shape ${result.shape}`);
      check(sameValues(result.values, flat(c.values)), `values ${result.values.slice(0, 16)}`);
    },
  },
  // Hostile headers for every decoder (tests/vectors/README.md): each case names its decoder, and its input is an
  // envelope, JSON text (for what an object cannot say, such as a member named twice) or a frame in hex.
  "r3wire.hostile/1": {
    input: ["envelope", "text", "frame_hex"],
    decode(payload, options, c) {
      const decoder = HOSTILE_DECODERS[c.decoder];
      check(decoder !== undefined, `unknown decoder ${JSON.stringify(c.decoder)}`);
      return decoder(c.frame_hex !== undefined ? fromHex(payload) : payload, options);
    },
    valid(result, c) {
      check(sameShape(result.shape, c.shape), `shape ${result.shape}`);
      if (c.dtype !== undefined) check(result.dtype === c.dtype, `dtype ${result.dtype}, expected ${c.dtype}`);
      if (c.values !== undefined) check(sameValues(result.values, flat(c.values)), `values ${result.values}`);
    },
  },
  "format:prime-rl": formatKind(readPrimeRl),
  "format:prime-rl-b85": formatKind(readPrimeRlB85),
  "format:nemo-rl": formatKind(readNemoRl),
  "format:sglang": formatKind(readSglang),
  "format:vllm-npy": formatKind(readVllmNpy),
  "format:json-lists": formatKind(readJsonLists),
  "format:fireworks-matrices": formatKind(readFireworksMatrices),
  "r3wire.routes-frame/1": {
    input: ["frame_hex"],
    decode: (payload, options) => decodeRoutesFrame(fromHex(payload), options),
    valid(result, c) {
      check(result.dtype === c.dtype, `dtype ${result.dtype}, expected ${c.dtype}`);
      check(sameShape(result.shape, c.shape), `shape ${result.shape}`);
      check(sameValues(result.values, flat(c.values)), `values ${result.values.slice(0, 16)}`);
    },
  },
};

/**
 * A whole-response case (response-engines-v1.json, response-alignment-v1.json, response-prompt-ids-v1.json,
 * response-stated-start-v1.json): every
 * routes field, in order,
 * with what is beside it; or, with verdict "reject", the field the DecodeError names.
 */
function runResponseCase(c) {
  const options = {};
  for (const [key, value] of Object.entries(c.read_args ?? {})) {
    if (!(key in READ_ARGS)) return `skipped: reader argument ${key} is not implemented`;
    if (value !== null) options[READ_ARGS[key]] = option(value);
  }
  let results;
  try {
    results = readResponse(c.body, options);
  } catch (error) {
    if (error instanceof NeedsZstd) return `skipped: ${error.message} (no zstd in Node without a package)`;
    if (!(error instanceof DecodeError)) throw new Error(`foreign exception ${error.stack}`);
    // A case with verdict "reject" (response-alignment-v1.json) must be refused naming its field.
    check(c.verdict === "reject", `rejected: ${error.message}`);
    check(error.field === c.field, `rejected naming ${JSON.stringify(error.field)}, expected ${JSON.stringify(c.field)}: ${error.message}`);
    return "passed";
  }
  check(c.verdict !== "reject", `read, expected a rejection naming ${JSON.stringify(c.field)}`);
  const expected = c.results ?? [];
  check(results.length === expected.length, `${results.length} routes fields, expected ${expected.length}`);
  // Token ids are compared exactly (BigInt, as the reader returns them), logprobs as numbers.
  const exact = (v) => (v instanceof JsonNumber && v.isInteger() ? v.toBigInt() : num(v));
  const list = (x) => (x === null || x === undefined ? null : JSON.stringify(x.map((v) => String(exact(v)))));
  expected.forEach((want, i) => {
    const got = results[i];
    const at = `result ${i} (${got.path})`;
    check(got.path === want.path, `${at}: path, expected ${want.path}`);
    check(got.format === want.format, `${at}: format ${got.format}, expected ${want.format}`);
    check(got.dtype === want.dtype, `${at}: dtype ${got.dtype}, expected ${want.dtype}`);
    check(sameValues(got.values, flat(want.values)), `${at}: values ${got.values.slice(0, 16)}`);
    check(list(got.tokenIds) === list(want.token_ids), `${at}: token_ids ${got.tokenIds}`);
    if (want.prompt_token_ids !== undefined) {
      check(list(got.promptTokenIds) === list(want.prompt_token_ids), `${at}: prompt_token_ids ${got.promptTokenIds}`);
    }
    check(list(got.logprobs) === list(want.logprobs), `${at}: logprobs ${got.logprobs}`);
    check(got.numClamped === num(want.num_clamped ?? 0), `${at}: num_clamped ${got.numClamped}`);
    if (want.start !== undefined) check(got.start === BigInt(option(want.start)), `${at}: start ${got.start}`);
    if (want.mask !== undefined) check(JSON.stringify(got.mask) === JSON.stringify(want.mask), `${at}: mask`);
    if (want.num_experts !== undefined) {
      check(got.numExperts === BigInt(option(want.num_experts)), `${at}: num_experts ${got.numExperts}`);
    }
  });
  return "passed";
}

/** Run one case; returns "passed", "skipped: ..." or throws with the reason it failed. */
function runCase(kind, c, verdict) {
  const inputs = kind.input.filter((k) => c[k] !== undefined);
  const unknown = Object.keys(c).filter(
    (k) => !DESCRIPTIVE.has(k) && !WRITER_KEYS.has(k) && !SELECTORS.has(k) && !kind.input.includes(k) && !(k in OPTIONS) && k !== "read_args",
  );
  if (unknown.length > 0) return `skipped: unknown case keys ${unknown.join(", ")}`;
  const readArgs = Object.keys(c.read_args ?? {});
  const unread = readArgs.filter((k) => !kind.readArgs || !(k in READ_ARGS));
  if (unread.length > 0) return `skipped: reader arguments ${unread.join(", ")} are not implemented`;
  check(inputs.length === 1, `expected exactly one of ${kind.input.join(", ")}, got ${inputs.join(", ")}`);
  const payload = c[inputs[0]];
  const options = {};
  for (const [key, name] of Object.entries(OPTIONS)) {
    if (c[key] !== undefined && c[key] !== null) options[name] = option(c[key]);
  }
  for (const [key, name] of Object.entries(READ_ARGS)) {
    const value = (c.read_args ?? {})[key];
    if (value !== undefined && value !== null) options[name] = option(value);
  }
  let result;
  try {
    result = kind.decode(payload, options, c);
  } catch (error) {
    if (!(error instanceof DecodeError)) throw new Error(`foreign exception ${error.stack}`);
    check(verdict === "reject", `rejected: ${error.message}`);
    check(error.field === c.field, `rejected naming ${JSON.stringify(error.field)}, expected ${JSON.stringify(c.field)}: ${error.message}`);
    if ((c.note ?? "").includes("UnsupportedVersionError")) {
      check(error.unsupportedVersion, `expected an unsupported-version error: ${error.message}`);
    }
    return "passed";
  }
  check(verdict === "valid", `accepted; expected rejection naming ${JSON.stringify(c.field)}`);
  kind.valid(result, c, typeof payload === "string" && inputs[0] === "text" ? parseJson(payload) : payload);
  return "passed";
}

function main(argv) {
  const files = argv.length
    ? argv
    : readdirSync(VECTORS)
        .filter((f) => f.endsWith(".json"))
        .sort()
        .map((f) => join(VECTORS, f));
  let passed = 0;
  let failed = 0;
  let skipped = 0;
  // Runs one case and counts its outcome; true when it passed.
  const tally = (label, run) => {
    try {
      const outcome = run();
      if (outcome === "passed") {
        passed++;
        return true;
      }
      console.log(`skip ${label}: ${outcome.slice("skipped: ".length)}`);
      skipped++;
    } catch (error) {
      console.log(`FAIL ${label}: ${error.message}`);
      failed++;
    }
    return false;
  };
  const docs = [];
  for (const file of files) {
    try {
      docs.push([basename(file), parseJson(readFileSync(file, "utf8"))]);
    } catch (error) {
      console.log(`FAIL ${basename(file)}: not readable as JSON: ${error.message}`);
      failed++;
    }
  }
  // A newer file may supersede cases of an older one ({"supersedes": {file: {verdict: [names]}}}): those are
  // no longer expected of a decoder, and are counted as skipped.
  const superseded = new Map();
  for (const [name, doc] of docs) {
    for (const [file, verdicts] of Object.entries(doc.supersedes ?? {})) {
      for (const [verdict, names] of Object.entries(verdicts)) {
        for (const caseName of names) superseded.set(`${file} ${verdict} ${caseName}`, name);
      }
    }
  }
  for (const [name, doc] of docs) {
    const id =
      doc.format !== undefined
        ? `format:${doc.format}`
        : doc.schema === undefined && Array.isArray(doc.cases)
          ? "responses"
          : `${doc.schema}/${doc.version instanceof JsonNumber ? doc.version.text : doc.version}`;
    if (id === "responses") {
      let fileCases = 0;
      for (const c of doc.cases) {
        const label = `${name} cases ${c.name}`;
        if (superseded.has(label)) {
          console.log(`skip ${label}: superseded by ${superseded.get(label)}`);
          skipped++;
          continue;
        }
        if (tally(`${name} ${c.name}`, () => runResponseCase(c))) fileCases++;
      }
      console.log(`ok   ${name}: ${fileCases} cases (whole responses)`);
      continue;
    }
    const kind = KINDS[id];
    if (kind === undefined) {
      const why =
        NOT_HERE[id] ??
        `${doc.format !== undefined ? `another engine's format (${doc.format})` : `kind ${id}`} is not implemented by the JavaScript decoder`;
      console.log(`skip ${name}: ${why}`);
      continue;
    }
    let fileCases = 0;
    for (const verdict of ["valid", "reject"]) {
      for (const c of doc[verdict] ?? []) {
        const label = `${name} ${verdict} ${c.name}`;
        if (superseded.has(label)) {
          console.log(`skip ${label}: superseded by ${superseded.get(label)}`);
          skipped++;
          continue;
        }
        if (tally(label, () => runCase(kind, c, verdict))) fileCases++;
      }
    }
    console.log(`ok   ${name}: ${fileCases} cases (${id})`);
  }
  console.log(`${passed} passed, ${failed} failed, ${skipped} skipped`);
  return failed === 0 && passed > 0 ? 0 : 1;
}

process.exitCode = main(process.argv.slice(2));
