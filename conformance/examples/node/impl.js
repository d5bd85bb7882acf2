#!/usr/bin/env node
// A second, independent implementation of sampling-mask spec v1 (revision 1.4) in plain Node.js
// (>= 18, no npm packages), written from the spec's text to show how any language joins the
// conformance suite.
//
// It speaks the runner protocol: one JSON request per line on stdin, one JSON response per line on
// stdout (conformance/README.md, "Runner protocol"). It decodes, validates and encodes two forms:
//   - "json-rows": bare JSON nested lists (vLLM choices[i].sampling_mask, SGLang);
//   - "ragged":    ids int32 [nnz] + offsets int64 [T+1] typed arrays, with cu_seqlens, vocab_size,
//                  companions and metadata;
// and the model operations of SPEC 3.6 (concatenate, slice, take) on model masks.
// Requests are parsed with the same number-keeping tokenizer as json-rows, so a metadata value keeps
// its kind: 4 is an integer and 4.0 a float (SPEC 5.2, 3.6), as the answers write them back.
// It declares these conformance classes in answer to the runner's "describe" request (CLASSES
// below), so only their cases run; anything else is answered {"unsupported": ...}.
//
// Run the suite against it:
//   sampling-mask conformance --command "node conformance/examples/node/impl.js"
//   sampling-mask conformance --command "node conformance/examples/node/impl.js" --generated 200
"use strict";

const readline = require("node:readline");

const DEFAULT_LIMITS = {
  max_rows: 2 ** 28,
  max_segments: 2 ** 24,
  max_nnz: 2 ** 32,
  max_width: 2 ** 20,
  max_vocab: 2 ** 24,
  max_bytes: 2 ** 34,
  max_json_depth: 16,
};
const INT32_MAX = 2147483647;
const DTYPES = {
  int8: [1, "int"], int16: [2, "int"], int32: [4, "int"], int64: [8, "int"],
  uint8: [1, "int"], uint16: [2, "int"], uint32: [4, "int"], uint64: [8, "int"],
  float16: [2, "float"], float32: [4, "float"], float64: [8, "float"],
};
const METADATA_TYPES = { temperature: "number", top_k: "integer", top_p: "number", min_p: "number", producer: "string" };
const NON_FINITE = { NaN: NaN, Infinity: Infinity, "-Infinity": -Infinity };

// ------------------------------------------------------------------------------------ errors
class Rejected extends Error {
  constructor(code, message, where = {}) {
    super(message);
    this.code = code;
    this.where = where;
  }
}
class Unsupported extends Error {}
const reject = (code, message, where) => { throw new Rejected(code, message, where); };

function checkCount(value, limit, what, field) {
  if (value < 0) reject("E_RANGE", `${what} must be >= 0`, { field });
  if (value > limit) reject("E_LIMIT", `${what} ${value} exceeds the limit ${limit}`, { field });
  return value;
}

// ------------------------------------------------------------------------------------ typed arrays
// Returns {dtype, kind, shape, data: Array of Number} (row-major, flat). int64 beyond 2**53 loses
// precision but keeps its order of magnitude, which is all the range checks need.
function typedArray(spec, field, limits) {
  if (spec === null || typeof spec !== "object" || Array.isArray(spec)) {
    reject("E_SCHEMA", "a typed array is an object {dtype, shape, values | hex}", { field });
  }
  const info = DTYPES[spec.dtype];
  if (typeof spec.dtype !== "string" || info === undefined) reject("E_DTYPE", `unknown dtype ${spec.dtype}`, { field });
  const [itemsize, kind] = info;
  if (!Array.isArray(spec.shape)) reject("E_SHAPE", "shape must be a list", { field });
  // SPEC 8.5, declared arrays: the size computed exactly (BigInt), compared with max_bytes before
  // the bytes present are (a forged shape is E_LIMIT, never E_BYTES).
  let size = BigInt(itemsize);
  for (const dim of spec.shape) {
    if (!Number.isInteger(dim) || dim < 0) reject("E_SHAPE", "dimensions are non-negative integers", { field });
    size *= BigInt(dim);
  }
  if (size > BigInt(limits.max_bytes)) reject("E_LIMIT", `${size} bytes exceed the limit`, { field });
  const count = Number(size) / itemsize;
  const hasHex = "hex" in spec, hasValues = "values" in spec;
  if (hasHex === hasValues) reject("E_SCHEMA", "exactly one of values and hex", { field });
  let data;
  if (hasHex) {
    if (typeof spec.hex !== "string") reject("E_SCHEMA", "hex is a string", { field });
    if (spec.hex.length !== 2 * count * itemsize) reject("E_BYTES", `needs ${count * itemsize} bytes`, { field });
    if (!/^[0-9a-fA-F]*$/.test(spec.hex)) reject("E_ENCODING", "hex is not hexadecimal", { field });
    const buf = Buffer.from(spec.hex, "hex");
    data = new Array(count);
    for (let i = 0; i < count; i++) data[i] = readElement(buf, i * itemsize, spec.dtype);
  } else {
    data = [];
    flatten(spec.values, spec.shape, 0, data, field);
    if (kind === "float") {
      data = data.map((v) => {
        if (typeof v === "string" && v in NON_FINITE) return NON_FINITE[v];
        if (typeof v !== "number") reject("E_DTYPE", "expected a number", { field });
        return spec.dtype === "float32" ? Math.fround(v) : v;
      });
    } else if (data.some((v) => !Number.isInteger(v))) {
      reject("E_DTYPE", "expected integers", { field });
    }
  }
  return { dtype: spec.dtype, kind, shape: spec.shape, data };
}

function readElement(buf, at, dtype) {
  switch (dtype) {
    case "int8": return buf.readInt8(at);
    case "int16": return buf.readInt16LE(at);
    case "int32": return buf.readInt32LE(at);
    case "int64": return Number(buf.readBigInt64LE(at));
    case "uint8": return buf.readUInt8(at);
    case "uint16": return buf.readUInt16LE(at);
    case "uint32": return buf.readUInt32LE(at);
    case "uint64": return Number(buf.readBigUInt64LE(at));
    case "float32": return buf.readFloatLE(at);
    case "float64": return buf.readDoubleLE(at);
    default: throw new Unsupported(`dtype ${dtype} from bytes`);
  }
}

function flatten(values, shape, depth, out, field) {
  if (depth === shape.length) {
    if (Array.isArray(values)) reject("E_SHAPE", "values nest deeper than shape", { field });
    out.push(values);
    return;
  }
  if (!Array.isArray(values) || values.length !== shape[depth]) reject("E_SHAPE", "values do not nest as shape", { field });
  for (const v of values) flatten(v, shape, depth + 1, out, field);
}

// An integer 1-D array whose values must fit [lo, hi] (the target dtype of the spec's layout).
function intVector(arr, field, lo, hi) {
  if (arr.kind !== "int") reject("E_DTYPE", `${field} must be integers, got ${arr.dtype}`, { field });
  if (arr.shape.length !== 1) reject("E_SHAPE", `${field} is one-dimensional`, { field });
  for (const v of arr.data) if (v < lo || v > hi) reject("E_RANGE", `${field} value ${v} does not fit`, { field, value: v });
  return arr.data;
}

function floatVector(arr, field, size) {
  if (arr.shape.length !== 1) reject("E_SHAPE", `${field} is one-dimensional`, { field });
  if (arr.kind !== "float") reject("E_DTYPE", `${field} must be floats, got ${arr.dtype}`, { field });
  if (arr.data.length !== size) reject("E_SHAPE", `${field} needs ${size} values, got ${arr.data.length}`, { field });
  return arr.data.map(Math.fround);
}

// ------------------------------------------------------------------------------------ metadata values
// A metadata number keeps its JSON spelling: 4 is an integer, 4.0 and 1e2 are floats (SPEC 11.2),
// {"float": "NaN"} a non-finite float. Equality (SPEC 3.5) compares by value; the kind survives.
class MetaNumber {
  constructor(text, value, isFloat) { this.text = text; this.value = value; this.isFloat = isFloat; }
  static fromToken(text) { return new MetaNumber(text, Number(text), /[.eE]/.test(text)); }
}

function metadataEqual(a, b) {
  const ka = Object.keys(a), kb = Object.keys(b);
  if (ka.length !== kb.length || !ka.every((k) => Object.prototype.hasOwnProperty.call(b, k))) return false;
  return ka.every((k) => {
    const x = a[k], y = b[k];
    if (x instanceof MetaNumber || y instanceof MetaNumber) {
      if (!(x instanceof MetaNumber && y instanceof MetaNumber)) return false;
      return x.value === y.value || (Number.isNaN(x.value) && Number.isNaN(y.value));
    }
    return x === y;
  });
}

// ------------------------------------------------------------------------------------ the model
// A mask: {ids: Number[], offsets: Number[], cu: Number[], vocab: Number|null, companions: {}, metadata: {}}.
function buildMask(ids, offsets, opts, limits) {
  const { cu = [0, Math.max(offsets.length - 1, 0)], vocab = null, companions = {}, metadata = {} } = opts;
  const numRows = Math.max(offsets.length - 1, 0);
  checkCount(numRows, limits.max_rows, "row count", "offsets");
  checkCount(ids.length, limits.max_nnz, "id count", "ids");
  if (offsets.length === 0) reject("E_OFFSETS", "offsets holds T+1 >= 1 entries", { field: "offsets" });
  if (offsets[0] !== 0) reject("E_OFFSETS", "offsets[0] must be 0", { field: "offsets" });
  for (let t = 0; t < numRows; t++) {
    if (offsets[t + 1] < offsets[t]) reject("E_OFFSETS", "offsets decrease", { field: "offsets", row: t });
  }
  if (offsets[numRows] !== ids.length) reject("E_OFFSETS", `offsets[T] must equal nnz = ${ids.length}`, { field: "offsets" });
  if (cu.length === 0) reject("E_SEGMENTS", "cu_seqlens holds B+1 >= 1 entries", { field: "cu_seqlens" });
  checkCount(cu.length - 1, limits.max_segments, "segment count", "cu_seqlens");
  if (cu[0] !== 0) reject("E_SEGMENTS", "cu_seqlens[0] must be 0", { field: "cu_seqlens" });
  for (let b = 0; b + 1 < cu.length; b++) {
    if (cu[b + 1] < cu[b]) reject("E_SEGMENTS", "cu_seqlens decrease", { field: "cu_seqlens", segment: b });
  }
  if (cu[cu.length - 1] !== numRows) reject("E_SEGMENTS", `cu_seqlens[B] must equal T = ${numRows}`, { field: "cu_seqlens" });
  // SPEC 8.1: what the mask takes: int32 ids, int64 offsets and cu_seqlens, 4 bytes per companion value.
  let bytes = 4 * ids.length + 8 * (numRows + 1) + 8 * cu.length;
  for (const values of Object.values(companions)) bytes += 4 * values.length;
  if (bytes > limits.max_bytes) reject("E_LIMIT", `the mask takes ${bytes} bytes, over ${limits.max_bytes}`, { field: "max_bytes" });
  for (let t = 0; t < numRows; t++) {
    const width = offsets[t + 1] - offsets[t];
    if (width > limits.max_width) reject("E_LIMIT", `row width ${width} exceeds the limit`, { field: "ids", row: t });
  }
  for (let t = 0; t < numRows; t++) {
    const seen = new Set();
    for (let j = offsets[t]; j < offsets[t + 1]; j++) {
      const id = ids[j];
      if (id < 0 || (vocab !== null && id >= vocab)) reject("E_RANGE", `id ${id} out of range`, { field: "ids", row: t, value: id });
      if (seen.has(id)) reject("E_DUPLICATE", `id ${id} repeated within a row`, { field: "ids", row: t, value: id });
      seen.add(id);
    }
  }
  const sampled = companions.sampled_token_ids;
  if (sampled !== undefined) {
    if (sampled.length !== numRows) reject("E_SHAPE", `expected ${numRows} sampled ids`, { field: "sampled_token_ids" });
    for (let t = 0; t < numRows; t++) {
      const s = sampled[t], empty = offsets[t + 1] === offsets[t];
      if (s < (empty ? -1 : 0) || (vocab !== null && s >= vocab)) {
        reject("E_RANGE", "sampled id out of range (-1 only on empty rows)", { field: "sampled_token_ids", row: t, value: s });
      }
      if (!empty && !ids.slice(offsets[t], offsets[t + 1]).includes(s)) {
        reject("E_MISSING_SAMPLED", "non-empty row does not contain its sampled id", { field: "sampled_token_ids", row: t, value: s });
      }
    }
  }
  const temperature = companions.temperature;
  if (temperature !== undefined) {
    temperature.forEach((v, t) => {
      if (!Number.isNaN(v) && !(v > 0 && Number.isFinite(v))) {
        reject("E_RANGE", "temperature must be > 0 and finite (or NaN: unknown)", { field: "temperature", row: t });
      }
    });
  }
  return { ids, offsets, cu, vocab, companions, metadata };
}

function checkVocab(vocab, limits) {
  if (vocab === undefined || vocab === null) return null;
  if (!Number.isInteger(vocab)) reject("E_SCHEMA", "vocab_size must be an integer", { field: "vocab_size" });
  if (vocab < 1) reject("E_RANGE", "vocab_size must be >= 1", { field: "vocab_size", value: vocab });
  return checkCount(vocab, limits.max_vocab, "vocab_size", "vocab_size");
}

function checkMetadata(metadata) {
  if (metadata === undefined || metadata === null) return {};
  if (typeof metadata !== "object" || Array.isArray(metadata)) reject("E_SCHEMA", "metadata must be an object", { field: "metadata" });
  for (const [key, value] of Object.entries(metadata)) {
    const field = `metadata.${key}`;
    const isNumber = value instanceof MetaNumber;
    if (value !== null && !isNumber && !["string", "boolean"].includes(typeof value)) reject("E_SCHEMA", "metadata values are scalars", { field });
    const want = METADATA_TYPES[key];
    if (want !== undefined && value !== null) {
      // An integer key takes integers only: 4.0 is a float (SPEC 5.2).
      const good = want === "integer" ? isNumber && !value.isFloat : want === "number" ? isNumber : typeof value === want;
      if (!good) reject("E_SCHEMA", `metadata ${key} must be ${want}`, { field });
    }
  }
  return metadata;
}

// The canonical model mask: rows ascending, support_logprobs permuted along with their ids.
function toModelJson(m) {
  const jsonFloat = (v) => (Number.isNaN(v) ? "NaN" : v === Infinity ? "Infinity" : v === -Infinity ? "-Infinity" : v);
  const rows = [], support = [];
  const perId = m.companions.support_logprobs;
  for (let t = 0; t + 1 < m.offsets.length; t++) {
    const order = [];
    for (let j = m.offsets[t]; j < m.offsets[t + 1]; j++) order.push(j);
    order.sort((a, b) => m.ids[a] - m.ids[b]);
    rows.push(order.map((j) => m.ids[j]));
    if (perId !== undefined) support.push(order.map((j) => jsonFloat(perId[j])));
  }
  const out = { rows, cu_seqlens: m.cu, vocab_size: m.vocab };
  for (const name of ["sampled_token_ids", "sampled_logprobs", "temperature"]) {
    if (m.companions[name] !== undefined) out[name] = m.companions[name].map(jsonFloat);
  }
  if (perId !== undefined) out.support_logprobs = support;
  if (Object.keys(m.metadata).length) out.metadata = m.metadata;
  return out;
}

// ------------------------------------------------------------------------------------ ragged form
function decodeRagged(payload, limits) {
  if (payload === null || typeof payload !== "object" || Array.isArray(payload)) reject("E_SCHEMA", "a ragged payload is an object");
  for (const key of ["ids", "offsets"]) if (!(key in payload)) reject("E_SCHEMA", `a ragged payload needs ${key}`, { field: key });
  const vocab = checkVocab(payload.vocab_size, limits);
  const metadata = checkMetadata(payload.metadata);
  const get = (key) => (payload[key] === undefined || payload[key] === null ? undefined : typedArray(payload[key], key, limits));
  const cuArr = get("cu_seqlens");
  const comp = {};
  for (const name of ["sampled_token_ids", "sampled_logprobs", "temperature", "support_logprobs"]) comp[name] = get(name);
  const ids = intVector(typedArray(payload.ids, "ids", limits), "ids", -(2 ** 31), INT32_MAX);
  const offsets = intVector(typedArray(payload.offsets, "offsets", limits), "offsets", -(2 ** 63), 2 ** 63);
  const numRows = Math.max(offsets.length - 1, 0);
  const companions = {};
  if (comp.sampled_token_ids) companions.sampled_token_ids = intVector(comp.sampled_token_ids, "sampled_token_ids", -(2 ** 31), INT32_MAX);
  if (comp.sampled_logprobs) companions.sampled_logprobs = floatVector(comp.sampled_logprobs, "sampled_logprobs", numRows);
  if (comp.temperature) companions.temperature = floatVector(comp.temperature, "temperature", numRows);
  if (comp.support_logprobs) companions.support_logprobs = floatVector(comp.support_logprobs, "support_logprobs", ids.length);
  const opts = { vocab, companions, metadata };
  if (cuArr) opts.cu = intVector(cuArr, "cu_seqlens", -(2 ** 63), 2 ** 63);
  return buildMask(ids, offsets, opts, limits);
}

// Writers keep every row's stored order (SPEC 4.3): ids and support_logprobs go out as stored.
function encodeRagged(m) {
  const model = toModelJson(m);
  const ids = Array.from(m.ids);
  const offsets = Array.from(m.offsets);
  const out = {
    ids: { dtype: "int32", shape: [ids.length], values: ids },
    offsets: { dtype: "int64", shape: [offsets.length], values: offsets },
  };
  if (m.cu.length !== 2) out.cu_seqlens = { dtype: "int64", shape: [m.cu.length], values: m.cu };
  if (m.vocab !== null) out.vocab_size = m.vocab;
  if (Object.keys(m.metadata).length) out.metadata = m.metadata;
  for (const name of ["sampled_token_ids", "sampled_logprobs", "temperature"]) {
    if (model[name] !== undefined) {
      out[name] = { dtype: name === "sampled_token_ids" ? "int32" : "float32", shape: [model[name].length], values: model[name] };
    }
  }
  const perId = m.companions.support_logprobs;
  if (perId !== undefined) {
    const flat = Array.from(perId, (v) => (Number.isNaN(v) ? "NaN" : v === Infinity ? "Infinity" : v === -Infinity ? "-Infinity" : v));
    out.support_logprobs = { dtype: "float32", shape: [flat.length], values: flat };
  }
  return out;
}

// json-rows carries the rows only: refuse a mask it would lose anything of (SPEC 11.3).
function encodeJsonRows(m) {
  const lost = [];
  if (m.vocab !== null) lost.push("vocab_size");
  if (m.cu.length !== 2) lost.push("segments");
  if (Object.keys(m.companions).length) lost.push("companions");
  if (Object.keys(m.metadata).length) lost.push("metadata");
  if (lost.length) reject("E_SCHEMA", `json-rows cannot carry ${lost.join(", ")}`, { field: lost[0] });
  const rows = [];
  for (let t = 0; t + 1 < m.offsets.length; t++) rows.push(Array.from(m.ids.slice(m.offsets[t], m.offsets[t + 1])));
  return { text: JSON.stringify(rows) };
}

// ------------------------------------------------------------------------------------ json-rows form
// A strict JSON parser that keeps number literals as text, so 1.0 and 1e2 are not mistaken for ids
// and ids beyond 2**53 are range-checked exactly. Nesting is bounded before parsing.
function maxDepth(text) {
  let depth = 0, max = 0, inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === "\\") i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === "[" || c === "{") max = Math.max(max, ++depth);
    else if (c === "]" || c === "}") depth--;
  }
  return max;
}

class NumberToken {
  constructor(text) { this.text = text; }
}

function parseJson(text) {
  let i = 0;
  const fail = (why) => reject("E_ENCODING", `invalid JSON at ${i}: ${why}`);
  const ws = () => { while (i < text.length && " \t\n\r".includes(text[i])) i++; };
  function value() {
    ws();
    const c = text[i];
    if (c === "[") {
      i++;
      const out = [];
      ws();
      if (text[i] === "]") { i++; return out; }
      for (;;) {
        out.push(value());
        ws();
        if (text[i] === ",") { i++; continue; }
        if (text[i] === "]") { i++; return out; }
        fail("expected , or ]");
      }
    }
    if (c === "{") {
      i++;
      const out = {};
      ws();
      if (text[i] === "}") { i++; return out; }
      for (;;) {
        ws();
        if (text[i] !== '"') fail("expected a key");
        const key = string();
        ws();
        if (text[i++] !== ":") fail("expected :");
        out[key] = value();
        ws();
        if (text[i] === ",") { i++; continue; }
        if (text[i] === "}") { i++; return out; }
        fail("expected , or }");
      }
    }
    if (c === '"') return string();
    for (const [word, v] of [["true", true], ["false", false], ["null", null]]) {
      if (text.startsWith(word, i)) { i += word.length; return v; }
    }
    const m = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/.exec(text.slice(i, i + 400));
    if (!m) fail("unexpected character");
    i += m[0].length;
    return new NumberToken(m[0]);
  }
  const STRING = /"(?:[^"\\\u0000-\u001f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"/y;
  function string() {
    STRING.lastIndex = i;  // sticky: matches at i without copying the rest of the text
    const m = STRING.exec(text);
    if (!m) fail("bad string");
    i += m[0].length;
    return JSON.parse(m[0]);
  }
  const out = value();
  ws();
  if (i !== text.length) fail("text after the JSON value");
  return out;
}

function payloadText(payload) {
  if (payload && typeof payload.text === "string" && !("hex" in payload)) return payload.text;
  if (payload && typeof payload.hex === "string" && !("text" in payload)) {
    if (!/^([0-9a-fA-F]{2})*$/.test(payload.hex)) reject("E_ENCODING", "hex is not hexadecimal");
    try {
      return new TextDecoder("utf-8", { fatal: true }).decode(Buffer.from(payload.hex, "hex"));
    } catch (e) {
      reject("E_ENCODING", "the bytes are not UTF-8");
    }
  }
  reject("E_SCHEMA", "a byte payload is {text} or {hex}");
}

function decodeJsonRows(payload, limits) {
  const text = payloadText(payload);
  if (maxDepth(text) > limits.max_json_depth) reject("E_LIMIT", `JSON nests deeper than ${limits.max_json_depth}`);
  const doc = parseJson(text);
  if (!Array.isArray(doc)) reject("E_SCHEMA", "json-rows is a list of lists of ids", { field: "rows" });
  checkCount(doc.length, limits.max_rows, "row count", "rows");
  const ids = [], offsets = [0];
  doc.forEach((row, t) => {
    if (!Array.isArray(row)) reject("E_SCHEMA", "a row is a list of ids", { field: "rows", row: t });
  });
  doc.forEach((row, t) => {
    for (const v of row) {
      if (!(v instanceof NumberToken) || !/^-?(0|[1-9][0-9]*)$/.test(v.text)) {
        reject("E_DTYPE", "ids are JSON integers", { field: "rows", row: t });
      }
      const big = BigInt(v.text);
      if (big < 0n || big > BigInt(INT32_MAX)) reject("E_RANGE", `id ${v.text} is not an int32 id >= 0`, { field: "rows", row: t });
      ids.push(Number(big));
    }
    offsets.push(ids.length);
  });
  return buildMask(ids, offsets, {}, limits);
}

// ------------------------------------------------------------------------------------ model input (encode)
function maskFromModel(obj, limits) {
  if (!obj || !Array.isArray(obj.rows)) reject("E_SCHEMA", "rows must be a list of lists");
  const ids = [], offsets = [0];
  for (const row of obj.rows) {
    if (!Array.isArray(row)) reject("E_SCHEMA", "a row is a list of ids");
    for (const v of row) {
      if (!Number.isInteger(v)) reject("E_DTYPE", "ids are integers");
      ids.push(v);
    }
    offsets.push(ids.length);
  }
  const opts = { vocab: checkVocab(obj.vocab_size, limits), metadata: checkMetadata(obj.metadata), companions: {} };
  if (Array.isArray(obj.cu_seqlens)) opts.cu = obj.cu_seqlens;
  const toFloat = (v) => (typeof v === "string" ? NON_FINITE[v] : Math.fround(v));
  if (Array.isArray(obj.sampled_token_ids)) opts.companions.sampled_token_ids = obj.sampled_token_ids;
  for (const name of ["sampled_logprobs", "temperature"]) {
    if (Array.isArray(obj[name])) opts.companions[name] = obj[name].map(toFloat);
  }
  if (Array.isArray(obj.support_logprobs)) opts.companions.support_logprobs = obj.support_logprobs.flat().map(toFloat);
  return buildMask(ids, offsets, opts, limits);
}

// ------------------------------------------------------------------------------------ model operations
// SPEC 3.6, on masks built from model masks (and checked by buildMask).
const PER_ROW = ["sampled_token_ids", "sampled_logprobs", "temperature"];

// The rows [a, b) of a mask and their companions, as plain arrays (no segments).
function rowsOf(m, a, b) {
  const ids = m.ids.slice(m.offsets[a], m.offsets[b]);
  const offsets = [];
  for (let t = a; t <= b; t++) offsets.push(m.offsets[t] - m.offsets[a]);
  const companions = {};
  for (const name of Object.keys(m.companions)) {
    companions[name] = name === "support_logprobs" ? m.companions[name].slice(m.offsets[a], m.offsets[b]) : m.companions[name].slice(a, b);
  }
  return { ids, offsets, companions };
}

// Appends parts (each {ids, offsets, companions} of whole segments) with the given segment lengths.
function assemble(parts, lengths, names, vocab, metadata, limits) {
  const ids = [], offsets = [0], cu = [0], companions = {};
  for (const name of names) companions[name] = [];
  for (const part of parts) {
    const base = ids.length;
    ids.push(...part.ids);
    for (let t = 1; t < part.offsets.length; t++) offsets.push(base + part.offsets[t]);
    for (const name of names) companions[name].push(...part.companions[name]);
  }
  for (const n of lengths) cu.push(cu[cu.length - 1] + n);
  return buildMask(ids, offsets, { cu, vocab, companions, metadata }, limits);
}

function concatenate(payload, limits) {
  if (!payload || !Array.isArray(payload.masks)) reject("E_SCHEMA", "masks is a list of model masks", { field: "masks" });
  const masks = payload.masks.map((m) => maskFromModel(m, limits));
  if (masks.length === 0) reject("E_SCHEMA", "concatenating zero masks: nothing gives the result its V, companions or metadata");
  const vocabs = new Set(masks.map((m) => m.vocab).filter((v) => v !== null));
  if (vocabs.size > 1) reject("E_SCHEMA", "masks carry different vocab_size", { field: "vocab_size" });
  const names = Object.keys(masks[0].companions).sort();
  for (const m of masks) {
    if (Object.keys(m.companions).sort().join() !== names.join()) reject("E_SCHEMA", "masks carry different companions");
    if (!metadataEqual(masks[0].metadata, m.metadata)) reject("E_SCHEMA", "masks carry different metadata", { field: "metadata" });
  }
  const vocab = vocabs.size ? [...vocabs][0] : null;
  const parts = [], lengths = [];
  for (const m of masks) {
    const numRows = m.offsets.length - 1;
    parts.push(rowsOf(m, 0, numRows));
    for (let b = 0; b + 1 < m.cu.length; b++) lengths.push(m.cu[b + 1] - m.cu[b]);
  }
  // The first mask's metadata, each value as it spells it (SPEC 3.6).
  return assemble(parts, lengths, names, vocab, masks[0].metadata, limits);
}

function sliceRows(payload, limits) {
  const m = maskFromModel(payload && payload.mask, limits);
  const { start, stop } = payload;
  // Both bounds are integers, given; never defaulted, clipped or counted from the end (SPEC 3.6).
  if (!Number.isInteger(start) || !Number.isInteger(stop)) reject("E_SCHEMA", "start and stop are integers", { field: "start" });
  const numRows = m.offsets.length - 1;
  if (!(start >= 0 && start <= stop && stop <= numRows)) reject("E_RANGE", `0 <= start <= stop <= T = ${numRows}`, { field: "start" });
  const lengths = [];
  for (let b = 0; b + 1 < m.cu.length; b++) {
    const s = m.cu[b], e = m.cu[b + 1];
    if (s < e ? Math.max(s, start) < Math.min(e, stop) : start <= s && s <= stop) {
      lengths.push(s < e ? Math.min(e, stop) - Math.max(s, start) : 0);
    }
  }
  return assemble([rowsOf(m, start, stop)], lengths, Object.keys(m.companions), m.vocab, m.metadata, limits);
}

function take(payload, limits) {
  const m = maskFromModel(payload && payload.mask, limits);
  const segments = payload.segments;
  if (!Array.isArray(segments) || !segments.every(Number.isInteger)) reject("E_SCHEMA", "segments is a list of integers", { field: "segments" });
  const numSegments = m.cu.length - 1;
  const parts = [], lengths = [];
  for (const index of segments) {
    if (index < -numSegments || index >= numSegments) reject("E_SEGMENTS", `segment ${index} of B = ${numSegments}`, { segment: index });
    const b = index < 0 ? numSegments + index : index;
    parts.push(rowsOf(m, m.cu[b], m.cu[b + 1]));
    lengths.push(m.cu[b + 1] - m.cu[b]);
  }
  return assemble(parts, lengths, Object.keys(m.companions), m.vocab, m.metadata, limits);
}

// ------------------------------------------------------------------------------------ protocol
const CLASSES = ["json-rows reader", "json-rows writer", "ragged reader", "ragged writer", "model operations"];
const OPERATIONS = { concatenate, slice: sliceRows, take };

// A request as JSON values, numbers as JS numbers except metadata values (MetaNumber, kind kept).
function plain(value, inMetadata) {
  if (value instanceof NumberToken) return inMetadata ? MetaNumber.fromToken(value.text) : Number(value.text);
  if (Array.isArray(value)) return value.map((v) => plain(v, false));
  if (value !== null && typeof value === "object") {
    if (inMetadata && Object.keys(value).length === 1 && typeof value.float === "string" && value.float in NON_FINITE) {
      return new MetaNumber(null, NON_FINITE[value.float], true);
    }
    const out = {};
    for (const [k, v] of Object.entries(value)) {
      out[k] = k === "metadata" && v !== null && typeof v === "object" && !Array.isArray(v) && !(v instanceof NumberToken)
        ? Object.fromEntries(Object.entries(v).map(([mk, mv]) => [mk, plain(mv, true)]))
        : plain(v, false);
    }
    return out;
  }
  return value;
}

// JSON text of a response: a MetaNumber is written as it was read (4 or 4.0), a non-finite one as {"float": ...}.
function render(response) {
  const out = JSON.stringify(response, (key, value) => {
    if (!(value instanceof MetaNumber)) return value;
    if (!Number.isFinite(value.value)) return { float: Number.isNaN(value.value) ? "NaN" : value.value > 0 ? "Infinity" : "-Infinity" };
    return `\u0001NUM:${value.text}\u0001`;
  });
  return out.replace(/"\\u0001NUM:([^"\\]*)\\u0001"/g, "$1");
}

function handle(request) {
  if (request.op === "describe") return { ok: { classes: CLASSES } };
  const limits = { ...DEFAULT_LIMITS, ...(request.limits || {}) };
  const { op, form } = request;
  const decoders = { "json-rows": decodeJsonRows, ragged: decodeRagged };
  try {
    if (op in OPERATIONS && form === "model") return { ok: toModelJson(OPERATIONS[op](request.input, limits)) };
    if (!(form in decoders)) throw new Unsupported(`form ${form}`);
    if (op === "decode") return { ok: toModelJson(decoders[form](request.input, limits)) };
    if (op === "validate") { decoders[form](request.input, limits); return { ok: true }; }
    if (op === "encode") {
      const m = maskFromModel(request.input, limits);
      if (form === "ragged") return { ok: encodeRagged(m) };
      return { ok: encodeJsonRows(m) };
    }
    throw new Unsupported(`op ${op}`);
  } catch (e) {
    if (e instanceof Rejected) return { rejected: { code: e.code, message: e.message, ...e.where } };
    if (e instanceof Unsupported) return { unsupported: e.message };
    return { error: `${e.name}: ${e.message}` };
  }
}

const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity, terminal: false });
rl.on("line", (line) => {
  if (!line.trim()) return;
  let response;
  try {
    const request = plain(parseJson(line), false);
    response = { id: request.id, ...handle(request) };
  } catch (e) {
    response = { error: `bad request: ${e.message}` };
  }
  process.stdout.write(render(response) + "\n");
});
