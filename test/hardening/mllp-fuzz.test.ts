import { performance } from 'node:perf_hooks';
import { parseHl7Message, resendIdentity, splitMessages } from '../../src/adapters/hl7';
import { charsetOptionsSchema, decodeFrame } from '../../src/service/hl7-charset';
import { readBatch } from '../../src/service/mllp-batch';
import { frame, MllpDecoder, type DecodedFrame } from '../../src/service/mllp-framing';
import { fixtureTexts } from '../bench/measure';
import { caseRandom, fuzzSeed, mutateHl7, replay } from '../fuzz/mutate';
import { sized } from './soak';
import { rssMiB, sendAll, startServe, type ServeUnderTest } from './serve-under-test';

/**
 * Mutated fixture messages over MLLP into a running serve, pipelined on several connections: the
 * service survives, answers every frame that asks for one with ACKs it can read back, closes each connection once
 * its answers are out, and keeps every frame it received in the job store (handled or dead).
 * About 170 messages a second on two cores (each one synced to disk before its ACK): npm test
 * sends 1,000, `npm run soak` 10,000; HARDEN_FUZZ_MESSAGES sets another count, FUZZ_SEED replays.
 */
const COUNT = Number(process.env.HARDEN_FUZZ_MESSAGES ?? sized(1_000, 10_000));
const CONNECTIONS = 8;
const seed = fuzzSeed();
const originals = fixtureTexts('hl7', '.hl7').flatMap(splitMessages);
const ACK_CODES = new Set(['AA', 'AE', 'AR', 'CA', 'CE', 'CR']);
const charsets = charsetOptionsSchema.parse({});

/** The texts the listener hands on (to the handler or as dead letters) for one connection's bytes, read as it reads them. */
function textsReceived(bytes: Buffer): { texts: string[]; answered: number } {
  const decoder = new MllpDecoder(1 << 20);
  const frames: DecodedFrame[] = [...decoder.push(bytes), ...decoder.end()];
  const texts: string[] = [];
  let answered = 0;
  for (const f of frames) {
    if (f.kind === 'aborted') texts.push(decodeFrame(f.fragment, charsets).text);
    else if (f.kind === 'oversized') (texts.push(decodeFrame(f.head, charsets).text), answered++);
    else {
      const decoded = decodeFrame(f.payload, charsets);
      const batch = decoded.ok ? readBatch(decoded.text) : undefined;
      if (batch || !asksForNoAck(decoded.text)) answered++;
      texts.push(...(batch ? batch.groups.flatMap((g) => g.messages) : [decoded.text]));
    }
  }
  return { texts, answered };
}

/**
 * Whether a message may go unanswered as its sender asked: MSH-15 (accept) NE, ER or SU, and MSH-16
 * (application) empty or one of those, in any case as the listener reads them (Table 0155; an ER or
 * SU may be answered or not, by outcome).
 * Read here on its own, not through the listener's code, so a wrong reading there fails the test.
 */
function asksForNoAck(text: string): boolean {
  if (!text.startsWith('MSH')) return false;
  const header = text.split(/[\r\n]/, 1)[0] ?? '';
  const fields = header.split(header.charAt(3));
  const [accept, application] = [fields[14]?.trim().toUpperCase() ?? '', fields[15]?.trim().toUpperCase() ?? ''];
  const optional = (code: string) => code === 'NE' || code === 'ER' || code === 'SU';
  return optional(accept) && (application === '' || optional(application));
}

/** MSA-1 of an ACK, `batch` for a batch's acknowledgement (FHS/BHS, read by the batch tests), or what went wrong reading it. */
function ackCode(ack: string): string {
  if (/^(FHS|BHS)/.test(ack)) return 'batch';
  try {
    return parseHl7Message(ack).first('MSA')?.value(1) ?? 'no MSA';
  } catch (err) {
    return `unreadable: ${err instanceof Error ? err.message : String(err)}`;
  }
}

describe(`${COUNT} mutated HL7 messages over MLLP into a running serve (seed ${seed})`, () => {
  let s: ServeUnderTest;
  beforeAll(async () => {
    s = await startServe();
  });
  afterAll(async () => s.close());

  it('answers every frame that asks for an answer, closes every connection after its answers, and keeps every frame in the store', async () => {
    process.stdout.write(`mllp fuzz seed ${seed} (replay with FUZZ_SEED=${seed}; case i went on connection i % ${CONNECTIONS})\n`);
    const perConnection: string[][] = Array.from({ length: CONNECTIONS }, () => []);
    for (let i = 0; i < COUNT; i++) {
      const random = caseRandom(seed, i);
      perConnection[i % CONNECTIONS]?.push(mutateHl7(random.pick(originals), random));
    }
    const rssStart = rssMiB();
    const started = performance.now();
    const results = await Promise.all(perConnection.map((messages) => sendAll(s.serving.mllp.port, messages, 120_000)));
    const seconds = (performance.now() - started) / 1000;

    const codes: Record<string, number> = {};
    const problems: string[] = [];
    results.forEach((r, c) => {
      if (r.error) problems.push(`connection ${c}: ${r.error.message}`);
      const expected = textsReceived(Buffer.concat((perConnection[c] ?? []).map((m) => frame(m))));
      if (r.acks.length < expected.answered) problems.push(`connection ${c}: ${r.acks.length} ACK frames for ${expected.answered} frames`);
      // An ACK is written in the character set its message was read in: Latin-1 for one that was not valid UTF-8.
      for (const ack of r.raw.map((bytes) => decodeFrame(bytes, charsets).text)) {
        const code = ackCode(ack);
        codes[code] = (codes[code] ?? 0) + 1;
        if (code !== 'batch' && !ACK_CODES.has(code)) problems.push(`connection ${c}: an ACK that reads as ${JSON.stringify(code)}`);
      }
    });

    // A copy differing only in line endings, blank lines or MSH-7, under the same control id, is a resend: kept once.
    const stored = new Set((await s.serving.sync.store.listMessages({ kind: 'hl7' })).map((m) => resendIdentity(m.raw)));
    perConnection.forEach((messages, c) => {
      messages.forEach((text, n) => {
        const index = n * CONNECTIONS + c;
        const missing = textsReceived(frame(text)).texts.filter((t) => !stored.has(resendIdentity(t)));
        if (missing.length > 0) problems.push(`${replay(seed, index)}: ${missing.length} of its texts not in the store`);
      });
    });
    const health = await fetch(`http://${s.serving.http.host}:${s.serving.http.port}/healthz`);
    process.stdout.write(
      `mllp fuzz: ${COUNT} messages on ${CONNECTIONS} connections in ${seconds.toFixed(1)} s (${Math.round(COUNT / seconds)}/s); ACKs ${JSON.stringify(codes)}; ` +
        `${stored.size} distinct texts stored; RSS ${rssStart} -> ${rssMiB()} MiB\n`,
    );
    expect(problems.slice(0, 20)).toEqual([]);
    expect(health.status).toBe(200);
    expect(codes.AA ?? 0).toBeGreaterThan(0);
    expect((codes.AE ?? 0) + (codes.AR ?? 0)).toBeGreaterThan(0);
  }, sized(60_000, 300_000));
});
