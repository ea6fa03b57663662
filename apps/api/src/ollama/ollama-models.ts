import { createHash } from 'node:crypto';
import { z } from 'zod';
import { AppError } from '@app/common';
import type { Feature, ModelKind } from '@app/common';
import { parseInput } from '../common/validation';

/**
 * Ollama's model descriptions (/api/tags, /api/show, /api/ps) for Switchyard's catalog. Devices hold
 * the weights, so sizes are 0 and the digest is of the model id (stable, not of any file); the rest is
 * what Switchyard knows: the id, the catalog row, and the features of the devices serving the model.
 */

/** A GGUF quantization tag, as in `bartowski/Llama-3.2-3B-Instruct-GGUF:Q4_K_M`. */
const QUANTIZATION = /^(I?Q\d[A-Z0-9_]*|F16|F32|BF16)$/i;

export const ollamaDigest = (id: string) => createHash('sha256').update(id).digest('hex');

/** Ollama's `details`: only what the model id itself says (a GGUF repository, a quantization tag). */
export function ollamaDetails(id: string) {
  const tag = id.includes(':') ? id.slice(id.lastIndexOf(':') + 1) : '';
  return {
    parent_model: '',
    format: /gguf/i.test(id) ? 'gguf' : '',
    family: '',
    families: null,
    parameter_size: '',
    quantization_level: QUANTIZATION.test(tag) ? tag.toUpperCase() : '',
  };
}

/**
 * Ollama's `capabilities` from the model's kind and what the devices online for it announce (any of
 * them: a request goes to one that supports what it needs). A chat model has `completion`; an
 * embedding model has `embedding` only, as Ollama describes one.
 */
export function ollamaCapabilities(devices: Feature[][], kind: ModelKind = 'chat'): string[] {
  if (kind === 'embedding') {
    return ['embedding'];
  }
  const all = new Set(devices.flat());
  return ['completion', ...(all.has('tools') ? ['tools'] : []), ...(all.has('reasoning_effort') ? ['thinking'] : [])];
}

export const showSchema = z.object({
  model: z.string().min(1).max(200).optional(),
  /** Older clients send `name`. */
  name: z.string().min(1).max(200).optional(),
  verbose: z.boolean().optional(),
});

/** The model named by a POST /api/show body. */
export function parseShow(raw: unknown): string {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new AppError('invalid_request', 'The request body must be a JSON object.');
  }
  const input = Object.fromEntries(Object.entries(raw as Record<string, unknown>).filter(([, v]) => v !== null));
  const body = parseInput(showSchema, input);
  const model = body.model ?? body.name;
  if (!model) {
    throw new AppError('model_required', 'model is required', 'model');
  }
  return model;
}

export interface CatalogModel {
  id: string;
  kind: ModelKind;
  maxOutputTokens: number | null;
  ownedBy: string;
  createdAt: Date;
}

/** POST /api/show's answer. */
export function showResponse(model: CatalogModel, devices: Feature[][]) {
  return {
    license: '',
    modelfile: '',
    // Ollama's parameter text; the only one Switchyard sets is the output bound the admin gave the model.
    parameters: model.maxOutputTokens !== null ? `num_predict ${model.maxOutputTokens}` : '',
    template: '',
    details: ollamaDetails(model.id),
    model_info: {
      'general.name': model.id,
      'switchyard.owned_by': model.ownedBy,
      'switchyard.devices_online': devices.length,
      ...(model.maxOutputTokens !== null ? { 'switchyard.max_output_tokens': model.maxOutputTokens } : {}),
    },
    capabilities: ollamaCapabilities(devices, model.kind),
    modified_at: model.createdAt.toISOString(),
  };
}

/** One entry of GET /api/ps: a model with a device online, "loaded" until that presence expires unless renewed. */
export function psEntry(model: CatalogModel, until: number) {
  return {
    name: model.id,
    model: model.id,
    size: 0,
    digest: ollamaDigest(model.id),
    details: ollamaDetails(model.id),
    expires_at: new Date(until).toISOString(),
    size_vram: 0,
  };
}
