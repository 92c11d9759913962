import type { IncomingMessage } from 'node:http';
import { isUtf8 } from 'node:buffer';
import { createBrotliDecompress, createGunzip, createInflate, type BrotliDecompress, type Gunzip } from 'node:zlib';
import type { Gauge } from 'prom-client';
import { AppError } from '../errors.js';

/**
 * Decompressed bytes a compressed body may reach whatever its ratio: small bodies compress far
 * better than large ones, and this much inflates in well under a millisecond.
 */
export const INFLATE_ALLOWANCE_BYTES = 1024 * 1024;

/** Why a body was refused before it was parsed (the label of http_request_body_refusals_total). */
export type BodyRefusal = 'too_large' | 'inflate_ratio' | 'busy';

/**
 * The decompressed bytes of the bodies one process reads and holds at once. Each request holds
 * what it read until its response is done (its parsed body lives that long), so the process's
 * heap is bounded by what the largest bodies allowed at once take, not by how many arrive.
 */
export class BodyBytesGate {
  private held = 0;

  constructor(
    private readonly limitBytes: number,
    private readonly gauge: Pick<Gauge, 'set'>,
  ) {}

  /** A request's share, grown as its body arrives and given back once by release(). */
  hold(): BodyHold {
    let mine = 0;
    return {
      get bytes() {
        return mine;
      },
      take: (bytes) => {
        if (this.held + bytes > this.limitBytes) return false;
        this.held += bytes;
        mine += bytes;
        this.gauge.set(this.held);
        return true;
      },
      release: () => {
        this.held -= mine;
        mine = 0;
        this.gauge.set(this.held);
      },
    };
  }
}

export interface BodyHold {
  /** The request's share: the bytes its body announced, or took once decompressed. */
  readonly bytes: number;
  /** Adds bytes to this request's share; false (and nothing taken) when the process has no room. */
  take(bytes: number): boolean;
  release(): void;
}

export interface BodyReadOptions {
  /** The most decompressed bytes the route reads. */
  limitBytes: number;
  /** A compressed body may inflate to this many times the bytes on the wire so far (past INFLATE_ALLOWANCE_BYTES). */
  maxInflateRatio: number;
  hold: BodyHold;
  /** A body was refused, after `decodedBytes` of it were read (decompressed, for an encoded one). */
  onRefused(reason: BodyRefusal, decodedBytes: number): void;
}

export interface BodyText {
  text: string;
  /** Decompressed bytes. */
  bytes: number;
}

type Decoder = Gunzip | BrotliDecompress;

const DECODERS: Record<string, () => Decoder> = {
  gzip: createGunzip,
  'x-gzip': createGunzip,
  deflate: createInflate,
  br: createBrotliDecompress,
};

/**
 * Reads a request body as UTF-8 text, decompressing gzip, deflate or br. It stops the moment the
 * decompressed bytes pass the route's limit or the ratio cap, or the process has no room for them,
 * and refuses the body with 413 (503 for no room) before anything is parsed; a body announced
 * larger than the limit is refused before a byte is read. Bytes that are not UTF-8: 422.
 */
export function readBodyText(req: IncomingMessage, opts: BodyReadOptions): Promise<BodyText> {
  const encoding = (req.headers['content-encoding'] ?? 'identity').trim().toLowerCase();
  const makeDecoder = encoding === 'identity' ? undefined : DECODERS[encoding];
  if (encoding !== 'identity' && !makeDecoder) {
    return Promise.reject(
      new AppError(
        'invalid_request',
        `Unsupported Content-Encoding "${encoding}": send the body as is, or with gzip, deflate or br`,
        { status: 415, code: 'unsupported_content_encoding' },
      ),
    );
  }
  // Refused before a byte was read, the body is drained by Node and the connection kept, so the
  // client reads the answer; refused part-way, the connection is closed rather than read to the end.
  let reading = false;
  let decoded = 0;
  const refuse = (reason: BodyRefusal, message: string): AppError => {
    opts.onRefused(reason, decoded);
    const headers: Record<string, string> = reading ? { Connection: 'close' } : {};
    if (reason === 'busy')
      return new AppError('unavailable', message, { code: 'server_busy', headers: { ...headers, 'Retry-After': '1' } });
    return new AppError('payload_too_large', message, { code: 'request_too_large', headers });
  };
  const tooLarge = () =>
    refuse(
      'too_large',
      `Request body is too large: this endpoint reads at most ${opts.limitBytes} bytes${makeDecoder ? ' once decompressed' : ''}`,
    );
  const busy = () =>
    refuse('busy', 'The server is holding as many large request bodies as it can right now; retry in a moment.');

  const announced = Number(req.headers['content-length'] ?? NaN);
  if (Number.isFinite(announced) && announced > opts.limitBytes) return Promise.reject(tooLarge());
  // An uncompressed body's size is known: room for it all, or a refusal before it is read.
  let reserved = 0;
  if (!makeDecoder && Number.isFinite(announced) && announced > 0) {
    if (!opts.hold.take(announced)) return Promise.reject(busy());
    reserved = announced;
  }

  return new Promise<BodyText>((resolve, reject) => {
    reading = true;
    const decoder = makeDecoder?.();
    // Buffers until the end: outside the JS heap, and decoded once into one flat string for the parser.
    const chunks: Buffer[] = [];
    let wire = 0;
    let bytes = 0;
    let settled = false;

    const finish = (err: AppError | undefined, result?: BodyText) => {
      if (settled) return;
      settled = true;
      req.off('data', onWire);
      req.off('close', onClose);
      req.off('error', onAborted);
      if (decoder) {
        req.unpipe(decoder);
        decoder.destroy();
      } else {
        req.off('data', onChunk);
        req.off('end', onEnd);
      }
      if (err) {
        // Stop pulling bytes in; Node discards or closes the rest once the answer is sent.
        req.pause();
        reject(err);
      } else {
        resolve(result!);
      }
    };

    // Counted before the decoder sees the same chunk (this listener is added before pipe's).
    const onWire = (chunk: Buffer) => {
      wire += chunk.length;
      if (wire > opts.limitBytes) finish(tooLarge());
    };
    const onChunk = (chunk: Buffer) => {
      if (settled) return;
      bytes += chunk.length;
      decoded = bytes;
      if (bytes > opts.limitBytes) return finish(tooLarge());
      if (decoder && bytes > INFLATE_ALLOWANCE_BYTES && bytes > wire * opts.maxInflateRatio) {
        return finish(
          refuse(
            'inflate_ratio',
            `Request body is too large: a ${encoding} body may decompress to at most ${opts.maxInflateRatio} times its size on the wire`,
          ),
        );
      }
      if (bytes > reserved) {
        if (!opts.hold.take(bytes - reserved)) return finish(busy());
        reserved = bytes;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      if (settled) return;
      const body = Buffer.concat(chunks, bytes);
      chunks.length = 0;
      // The parser would turn invalid bytes into U+FFFD and silently change what the client sent.
      if (!isUtf8(body)) {
        return finish(
          new AppError('validation', 'Request validation failed', {
            detail: [{ loc: ['body'], msg: 'Body is not valid UTF-8', type: 'json_invalid' }],
          }),
        );
      }
      finish(undefined, { text: body.toString('utf8'), bytes });
    };
    const onAborted = () =>
      finish(new AppError('invalid_request', 'The request body stopped before its end', { code: 'request_aborted' }));
    const onClose = () => {
      if (!req.complete) onAborted();
    };

    req.on('close', onClose);
    req.on('error', onAborted);
    if (decoder) {
      req.on('data', onWire);
      decoder.on('data', onChunk);
      decoder.on('end', onEnd);
      decoder.on('error', (err: Error) =>
        finish(
          new AppError('invalid_request', `The body could not be decompressed as ${encoding}: ${err.message}`, {
            code: 'invalid_content_encoding',
          }),
        ),
      );
      req.pipe(decoder);
    } else {
      req.on('data', onChunk);
      req.on('end', onEnd);
    }
  });
}
