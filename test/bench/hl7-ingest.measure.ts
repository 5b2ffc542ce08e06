import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Ack } from '../../src/adapters/hl7';
import { createEligibilitySync } from '../../src/service/eligibility-sync';
import { createLogger } from '../../src/service/logger';
import { MllpListener } from '../../src/service/mllp-listener';
import { SqliteJobStore } from '../../src/sync/sqlite-job-store';
import { figure, threadFor, type Measured } from './measure';
import { msa, siuS12 } from './mllp-driver';

/**
 * SIU^S12 over MLLP on 8 connections into the durable store (the SQLite file, WAL), each ACK
 * sent once its message's commit is on disk, as serve receives them; against a bare listener that
 * ACKs each message without doing anything with it, on the same connections. Rounds alternate
 * between the two so a busy neighbour on the machine hits both. The store's WAL syncs (warm-up
 * included) say what bounds it: each connection waits for one sync per message.
 */
const CONNECTIONS = 8;
const PER_ROUND = 2000;
const ROUNDS = 3;

export async function measure(): Promise<Measured> {
  const dir = mkdtempSync(path.join(tmpdir(), 'elig-bench-ingest-'));
  // Nothing here calls the service or the chart: the worker is not started.
  const store = SqliteJobStore.open(dir);
  const sync = createEligibilitySync({
    store,
    dataDir: dir,
    service: { baseUrl: 'http://127.0.0.1:9', apiKey: 'sk_unused' },
    fhir: { baseUrl: 'http://127.0.0.1:9/fhir' },
    logger: createLogger({ level: 'silent' }),
  });
  const durable = new MllpListener({ handler: (text) => sync.receiveHl7(text), onDeadLetter: (letter) => sync.deadLetterHl7(letter) });
  const bare = new MllpListener({ handler: async (text) => [bareAck(text)] });
  const durablePort = (await durable.start()).port;
  const barePort = (await bare.start()).port;
  // The sender is another program: it runs in a thread of its own, not on the listener's event loop.
  const sender = threadFor<{ port: number; messages: string[]; connections: number }, { acks: string[]; seconds: number }>(path.join(__dirname, 'mllp-driver.ts'), 'sendAllFrom');
  let sent = 0;
  let accepted = 0;
  let ingestSeconds = 0;
  let bareSeconds = 0;
  // The listener's event loop (this thread) busy, in ms, during the measured rounds into the store.
  let ingestBusyMs = 0;
  const ratios: number[] = [];
  try {
    const timed = async (port: number, messages: string[], count: boolean) => {
      const { acks, seconds } = await sender.call({ port, messages, connections: CONNECTIONS });
      acks.forEach((ack, i) => {
        const { code, acknowledges } = msa(ack);
        if (acknowledges !== `BENCH-${sent + i}`) throw new Error(`ACK ${i} acknowledges ${acknowledges}`);
        if (count && code === 'AA') accepted++;
      });
      return seconds;
    };
    // A warm-up round each, not counted, then the measured rounds.
    for (let round = 0; round <= ROUNDS; round++) {
      const messages = Array.from({ length: PER_ROUND }, (_, i) => siuS12(sent + i, '20261124'));
      const b = await timed(barePort, messages, false);
      const loop = performance.eventLoopUtilization();
      const d = await timed(durablePort, messages, true);
      const busyMs = performance.eventLoopUtilization(loop).active;
      sent += PER_ROUND;
      if (round === 0) {
        accepted = 0;
        continue;
      }
      ingestBusyMs += busyMs;
      bareSeconds += b;
      ingestSeconds += d;
      ratios.push(b / d);
    }
    const counts = await store.counts(new Date().toISOString());
    const { syncs, commits, syncMs } = store.syncStats();
    const measured = PER_ROUND * ROUNDS;
    const perSecond = measured / ingestSeconds;
    const barePerSecond = measured / bareSeconds;
    const ratio = perSecond / barePerSecond;
    ratios.sort((a, b) => a - b);
    return {
      lines: [
        figure(`SIU^S12 messages, ${CONNECTIONS} connections, ${ROUNDS} rounds of`, `${PER_ROUND}`),
        figure('bare MLLP listener (ACK, no work)', `${barePerSecond.toFixed(0)} msg/s`),
        figure('into the SQLite store (ACK after commit)', `${perSecond.toFixed(0)} msg/s`),
        figure('ratio, rounds', `${ratios.map((r) => r.toFixed(2)).join(', ')}`),
        figure('event loop busy per message into the store', `${((ingestBusyMs * 1000) / measured).toFixed(0)} us`),
        figure('messages per commit, commits per WAL sync, ms per sync', `${(sent / commits).toFixed(1)}, ${(commits / syncs).toFixed(1)}, ${(syncMs / syncs).toFixed(2)}`),
        figure('checks stored', `${Object.values(counts.checks).reduce((a, b) => a + b, 0)}`),
        `bench hl7-ingest: ${perSecond.toFixed(0)} msg/s (ratio ${ratio.toFixed(2)} vs bare-mllp-ack)`,
      ],
      counts: { accepted, measured, perSecond, ratio },
    };
  } finally {
    await sender.close();
    await durable.stop();
    await bare.stop();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** An ACK AA for the message, built from its control id alone: the least a listener can answer. */
function bareAck(text: string): Ack {
  const controlId = text.split('\r', 1)[0]?.split('|')[9] ?? '';
  return { code: 'AA', controlId: `ACK-${controlId}`, acknowledges: controlId, text: `MSH|^~\\&|ELIG|BSD|||||ACK|ACK-${controlId}|P|2.5.1\rMSA|AA|${controlId}` };
}
