// KurrentDB's official Node.js client (@kurrent/kurrentdb-client, pinned in package.json) against an
// evdb node: appends, reads, every error the client maps (each must surface as its own class, not
// UnknownError), a filtered $all subscription with checkpoints (the client's default window, sent
// as `count`), and persistent subscriptions when the node serves them.
//
// Run by tests/clients/test_nodejs_client.py:
//   EVDB_URI=kurrentdb://admin:changeit@localhost:PORT?tlsCAFile=CA   (an admin, over TLS)
//   EVDB_USER_URI=kurrentdb://user:pw@localhost:PORT?tlsCAFile=CA     (a user without $all rights)
//   EVDB_MAX_APPEND=4096                                              (the node's MaxAppendSize)
// Prints one JSON line per check ({"check", "status": "ok"|"failed"|"skipped", "detail"}), then a
// summary line; exits 1 if a check failed.
"use strict";

const {
  KurrentDBClient,
  jsonEvent,
  binaryEvent,
  streamNameFilter,
  persistentSubscriptionToStreamSettingsFromDefaults,
  persistentSubscriptionToAllSettingsFromDefaults,
  START,
  NO_STREAM,
  ANY,
  WrongExpectedVersionError,
  StreamNotFoundError,
  StreamDeletedError,
  AccessDeniedError,
  MaxAppendSizeExceededError,
  DeadlineExceededError,
  PersistentSubscriptionDoesNotExistError,
  PersistentSubscriptionExistsError,
  PersistentSubscriptionMaximumSubscribersReachedError,
  UnknownError,
} = require("@kurrent/kurrentdb-client");
const crypto = require("node:crypto");

const results = [];

function report(check, status, detail = "") {
  results.push({ check, status, detail });
  process.stdout.write(JSON.stringify({ check, status, detail: String(detail) }) + "\n");
}

async function check(name, fn) {
  try {
    const detail = await fn();
    if (detail && detail.skipped) {
      report(name, "skipped", detail.skipped);
    } else {
      report(name, "ok", detail ?? "");
    }
  } catch (error) {
    report(name, "failed", describe(error));
  }
}

function describe(error) {
  if (!error) return String(error);
  const kind = error.constructor ? error.constructor.name : typeof error;
  return `${kind}${error.type ? ` (${error.type})` : ""}: ${error.message}`;
}

function fail(message) {
  throw new Error(message);
}

// `fn` must throw an instance of `kind`; returns that error
async function expectError(kind, fn) {
  try {
    await fn();
  } catch (error) {
    if (error instanceof kind) return error;
    fail(`expected ${kind.name}, got ${describe(error)}`);
  }
  fail(`expected ${kind.name}, nothing was thrown`);
}

const name = (prefix) => `${prefix}-${crypto.randomUUID().slice(0, 12)}`;
const event = (type, n = 0) => jsonEvent({ type, data: { n } });

async function collect(iterable) {
  const out = [];
  for await (const item of iterable) out.push(item);
  return out;
}

// the next value `emitter` gives for `event`, within `ms`
function next(emitter, eventName, ms) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ${eventName} within ${ms} ms`)), ms);
    emitter.once(eventName, (value) => {
      clearTimeout(timer);
      resolve(value);
    });
  });
}

async function waitFor(what, condition, ms) {
  const until = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > until) fail(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function main() {
  const client = KurrentDBClient.connectionString(process.env.EVDB_URI);
  const user = KurrentDBClient.connectionString(process.env.EVDB_USER_URI);
  const maxAppend = Number(process.env.EVDB_MAX_APPEND);

  await check("server features: version and BatchAppend", async () => {
    const features = await client.capabilities;
    if (features.serverVersion === "unknown") fail("the server version is unknown (no ServerFeatures)");
    const batch = { path: "/event_store.client.streams.Streams/BatchAppend" };
    if (!features.supports(batch)) fail("BatchAppend is not listed");
    return `server version ${features.serverVersion}`;
  });

  // -- appends and reads ----------------------------------------------------------------------------
  const stream = name("node");
  await check("append and read back", async () => {
    const result = await client.appendToStream(stream, [event("A", 0), event("B", 1)], {
      streamState: NO_STREAM,
    });
    if (result.nextExpectedRevision !== 1n) fail(`next expected revision ${result.nextExpectedRevision}`);
    const read = await collect(client.readStream(stream));
    const types = read.map((e) => e.event.type).join(",");
    if (types !== "A,B") fail(`read ${types}`);
    const binary = await client.appendToStream(stream, binaryEvent({ type: "C", data: Buffer.from("xyz") }), {
      streamState: 1n,
    });
    const all = await collect(client.readAll({ direction: "backwards", fromPosition: "end", maxCount: 20 }));
    if (!all.some((e) => e.event && e.event.streamId === stream && e.event.type === "C")) {
      fail("the last append is not at the end of $all");
    }
    return `position ${binary.position.commit}`;
  });

  // -- every mapped error ---------------------------------------------------------------------------
  await check("error: wrong expected version (append)", async () => {
    const error = await expectError(WrongExpectedVersionError, () =>
      client.appendToStream(stream, event("X"), { streamState: 7n }),
    );
    return `expected ${error.expectedState}, actual ${error.actualState}`;
  });
  await check("error: wrong expected version (delete)", async () => {
    const error = await expectError(WrongExpectedVersionError, () =>
      client.deleteStream(stream, { expectedRevision: 7n }),
    );
    if (error.streamName !== stream || error.expectedState !== 7n || error.actualState !== 2n) {
      fail(`stream ${error.streamName}, expected ${error.expectedState}, actual ${error.actualState}`);
    }
    return `expected 7, actual ${error.actualState}`;
  });
  await check("error: wrong expected version (soft-deleted stream)", async () => {
    await client.deleteStream(stream, { expectedRevision: 2n });
    const error = await expectError(WrongExpectedVersionError, () =>
      client.deleteStream(stream, { expectedRevision: 7n }),
    );
    if (error.actualState !== 2n) fail(`actual ${error.actualState}, not the last event number 2`);
    return `actual ${error.actualState}`;
  });
  await check("error: stream not found (read)", async () => {
    await expectError(StreamNotFoundError, () => collect(client.readStream(name("missing"))));
  });
  const tombstoned = name("tomb");
  await check("error: stream deleted (read, append, delete)", async () => {
    await client.appendToStream(tombstoned, event("A"), { streamState: NO_STREAM });
    await client.tombstoneStream(tombstoned, { expectedRevision: ANY });
    await expectError(StreamDeletedError, () => collect(client.readStream(tombstoned)));
    await expectError(StreamDeletedError, () => client.appendToStream(tombstoned, event("B")));
    const error = await expectError(StreamDeletedError, () => client.deleteStream(tombstoned));
    if (error.streamName !== tombstoned) fail(`stream name ${error.streamName}`);
  });
  await check("error: access denied", async () => {
    await expectError(AccessDeniedError, () => collect(user.readAll({ maxCount: 5 })));
    await expectError(AccessDeniedError, () => user.appendToStream(`$${name("secret")}`, event("A")));
  });
  await check("error: maximum append size exceeded", async () => {
    const big = binaryEvent({ type: "Big", data: Buffer.alloc(maxAppend + 1, 120) });
    const error = await expectError(MaxAppendSizeExceededError, () => client.appendToStream(name("big"), big));
    if (error.maxAppendSize !== maxAppend) fail(`max append size ${error.maxAppendSize}`);
    return `limit ${error.maxAppendSize}`;
  });
  await check("error: deadline exceeded", async () => {
    await expectError(DeadlineExceededError, () => client.deleteStream(name("late"), { deadline: 0 }));
  });

  // -- a filtered $all subscription with checkpoints (the default window: `count`) ------------------
  await check("filtered $all subscription: checkpoints", async () => {
    const prefix = name("cp");
    await client.appendToStream(
      name("noise"),
      Array.from({ length: 40 }, (_, i) => event("N", i)),
      { streamState: NO_STREAM },
    );
    const checkpoints = [];
    const subscription = client.subscribeToAll({
      fromPosition: START,
      filter: streamNameFilter({
        prefixes: [prefix],
        checkpointReached: (_sub, position) => {
          checkpoints.push(position.commit);
        },
      }),
    });
    const events = [];
    subscription.on("data", (resolved) => events.push(resolved.event));
    await next(subscription, "caughtUp", 20000);
    const history = checkpoints.length;
    if (history === 0) fail("no checkpoint while catching up");
    await client.appendToStream(
      name("noise"),
      Array.from({ length: 40 }, (_, i) => event("N", i)),
      { streamState: NO_STREAM },
    );
    await client.appendToStream(`${prefix}-1`, event("Mine"), { streamState: NO_STREAM });
    await waitFor("the matching event", () => events.length === 1, 20000);
    await waitFor("a live checkpoint", () => checkpoints.length > history, 20000);
    await subscription.unsubscribe();
    if (events[0].type !== "Mine") fail(`received ${events[0].type}`);
    const sorted = [...checkpoints].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    if (sorted.join() !== checkpoints.join()) fail("checkpoints go backwards");
    return `${history} checkpoints catching up, ${checkpoints.length - history} live`;
  });

  // -- persistent subscriptions ---------------------------------------------------------------------
  let persistent = true;
  await check("persistent subscriptions: to a stream", async () => {
    const target = name("ps");
    const group = name("group");
    try {
      await client.createPersistentSubscriptionToStream(
        target,
        group,
        persistentSubscriptionToStreamSettingsFromDefaults({ startFrom: START }),
      );
    } catch (error) {
      if (error instanceof UnknownError && /UNIMPLEMENTED|Method not found/i.test(error.message)) {
        persistent = false;
        return { skipped: "the node serves no persistent subscriptions yet (UNIMPLEMENTED)" };
      }
      throw error;
    }
    await client.appendToStream(target, [event("P", 0), event("P", 1), event("P", 2)], {
      streamState: NO_STREAM,
    });
    const subscription = client.subscribeToPersistentSubscriptionToStream(target, group);
    const seen = [];
    for await (const resolved of subscription) {
      seen.push(resolved.event.revision);
      await subscription.ack(resolved);
      if (seen.length === 3) break;
    }
    await subscription.unsubscribe();
    if (seen.join() !== "0,1,2") fail(`received revisions ${seen}`);

    await expectError(PersistentSubscriptionExistsError, () =>
      client.createPersistentSubscriptionToStream(target, group, persistentSubscriptionToStreamSettingsFromDefaults()),
    );
    await expectError(PersistentSubscriptionDoesNotExistError, () =>
      client.getPersistentSubscriptionToStreamInfo(target, name("none")),
    );
    const info = await client.getPersistentSubscriptionToStreamInfo(target, group);
    if (info.groupName !== group) fail(`info names group ${info.groupName}`);
    const listed = await client.listAllPersistentSubscriptions();
    if (!listed.some((s) => s.groupName === group)) fail("the group is not listed");

    const single = name("single");
    await client.createPersistentSubscriptionToStream(
      target,
      single,
      persistentSubscriptionToStreamSettingsFromDefaults({ startFrom: START, maxSubscriberCount: 1 }),
    );
    const first = client.subscribeToPersistentSubscriptionToStream(target, single);
    await next(first, "data", 20000);
    const second = client.subscribeToPersistentSubscriptionToStream(target, single);
    const refused = await next(second, "error", 20000);
    await first.unsubscribe();
    if (!(refused instanceof PersistentSubscriptionMaximumSubscribersReachedError)) {
      fail(`a second consumer got ${describe(refused)}`);
    }
    await client.deletePersistentSubscriptionToStream(target, group);
    await expectError(PersistentSubscriptionDoesNotExistError, () =>
      client.deletePersistentSubscriptionToStream(target, group),
    );
    return `3 events acked; exists, does-not-exist and maximum-subscribers errors`;
  });
  await check("persistent subscriptions: to $all, filtered", async () => {
    if (!persistent) return { skipped: "the node serves no persistent subscriptions yet (UNIMPLEMENTED)" };
    const prefix = name("psall");
    const group = name("group");
    await client.createPersistentSubscriptionToAll(
      group,
      persistentSubscriptionToAllSettingsFromDefaults({ startFrom: START }),
      { filter: streamNameFilter({ prefixes: [prefix] }) },
    );
    await client.appendToStream(`${prefix}-1`, event("Q"), { streamState: NO_STREAM });
    const subscription = client.subscribeToPersistentSubscriptionToAll(group);
    let received;
    for await (const resolved of subscription) {
      await subscription.ack(resolved);
      received = resolved.event;
      break;
    }
    await subscription.unsubscribe();
    if (!received || received.streamId !== `${prefix}-1`) fail(`received ${received && received.streamId}`);
    await client.getPersistentSubscriptionToAllInfo(group);
    await client.deletePersistentSubscriptionToAll(group);
  });

  await client.dispose();
  await user.dispose();
}

main()
  .catch((error) => report("run", "failed", describe(error)))
  .finally(() => {
    const failed = results.filter((r) => r.status === "failed").length;
    const skipped = results.filter((r) => r.status === "skipped").length;
    process.stdout.write(
      JSON.stringify({ summary: { ok: results.length - failed - skipped, failed, skipped } }) + "\n",
    );
    process.exit(failed ? 1 : 0);
  });
