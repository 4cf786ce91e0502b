// evdb's stand-in for the Node.js client suite's packages/test/src/utils/Cluster.ts (which starts
// KurrentDB in Docker). Same public API; each Cluster runs one evdb launcher
// (tests/clients/nodejs_suite/launcher.py) that starts `evdb node` processes on free loopback ports,
// writes the certificates the suite reads, kills and restarts nodes on request, and stops them all
// when this worker goes away. tests/clients/run_nodejs_suite.py copies this file over the suite's own
// and sets EVDB_PYTHON, EVDB_LAUNCHER and EVDB_INSTANCES.
import { spawn, ChildProcessWithoutNullStreams } from "child_process";
import { randomUUID } from "crypto";
import { readFileSync, mkdirSync, openSync } from "fs";
import { join } from "path";
import { createInterface } from "readline";

import type { EndPoint, Certificate } from "@kurrent/kurrentdb-client";

import type { ConnectionFeatures } from "./index";

type LogLevel = "Warning" | "Debug" | "Information" | "Error" | "Verbose";
interface LogLevels {
  Default: LogLevel;
  System: LogLevel;
  Microsoft: LogLevel;
  Grpc: LogLevel;
}

type Answer = { error?: string; ports?: number[] } & Record<string, unknown>;

const setting = (name: string): string => {
  const value = process.env[name];
  if (!value) {
    throw new Error(`${name} is not set: run the suite with tests/clients/run_nodejs_suite.py`);
  }
  return value;
};

export class Cluster {
  public domain = "localhost";

  private readonly folder: string;
  private readonly options: string[] = [];
  private ports: number[] = [];
  private launcher?: ChildProcessWithoutNullStreams;
  private waiting: Array<(answer: Answer) => void> = [];
  private certificates?: {
    root: Buffer;
    users: { admin: Certificate; invalid: Certificate };
  };

  constructor(
    private readonly count: number,
    private readonly insecure = false,
    id: string = randomUUID()
  ) {
    this.folder = join(setting("EVDB_INSTANCES"), id);
  }

  // evdb's log levels are its own; the suite's choice only tunes KurrentDB's Serilog
  public setLogLevel = (_levels: Partial<LogLevels>): this => this;

  public setOption = (key: string, value: unknown): this => {
    this.options.push(`${key}=${value}`);
    return this;
  };

  public get certs() {
    if (this.insecure) throw new Error("No Cert for insecure cluster");
    if (!this.certificates) throw new Error("Cluster failed to initialize");
    return this.certificates;
  }

  public get certPath() {
    if (this.insecure) throw new Error("No Cert for insecure cluster");
    const user = (name: string) => ({
      certPath: join(this.folder, "certs", `user-${name}`, `user-${name}.crt`),
      certKeyPath: join(this.folder, "certs", `user-${name}`, `user-${name}.key`),
    });
    return {
      root: join(this.folder, "certs", "ca", "ca.crt"),
      admin: user("admin"),
      invalid: user("invalid"),
    };
  }

  public get uri(): string {
    return `${this.domain}:${this.ports[0]}`;
  }

  public get endpoints(): EndPoint[] {
    return this.ports.map((port) => ({ address: this.domain, port }));
  }

  public connectionString = (): string => this.connectionStringWithOverrides({});

  public connectionStringWithOverrides = (features: ConnectionFeatures): string => {
    const hosts = (features.endpoints ?? this.endpoints).map(({ address, port }) => `${address}:${port}`);
    const login = features.defaultUserCredentials ?? { username: "admin", password: "changeit" };
    const query: Array<[string, unknown]> = [];
    if (features.nodePreference) query.push(["nodePreference", features.nodePreference]);
    if (this.insecure) {
      query.push(["tls", false]);
    } else {
      const paths = this.certPath;
      query.push(["tls", true], ["tlsCAFile", paths.root]);
      if (features.userCertificates) {
        const user = features.userCertificates === "valid" ? paths.admin : paths.invalid;
        query.push(["userCertFile", user.certPath], ["userKeyFile", user.certKeyPath]);
      }
    }
    if (features.maxDiscoverAttempts) query.push(["maxDiscoverAttempts", features.maxDiscoverAttempts]);
    if (features.discoveryInterval) query.push(["discoveryInterval", features.discoveryInterval]);
    if (features.throwOnAppendFailure === false) query.push(["throwOnAppendFailure", false]);
    if (features.defaultDeadline) query.push(["defaultDeadline", features.defaultDeadline]);
    if (features.connectionName) query.push(["connectionName", features.connectionName]);
    const search = query.length ? `?${query.map(([k, v]) => `${k}=${v}`).join("&")}` : "";
    return `kurrentdb://${login.username}:${login.password}@${hosts.join(",")}${search}`;
  };

  public up = async (): Promise<void> => {
    mkdirSync(this.folder, { recursive: true });
    const args = [setting("EVDB_LAUNCHER"), "--folder", this.folder, "--count", `${this.count}`];
    if (this.insecure) args.push("--insecure");
    for (const option of this.options) args.push("--option", option);
    const log = openSync(join(this.folder, "launcher.err"), "a");
    const launcher = spawn(setting("EVDB_PYTHON"), args, {
      stdio: ["pipe", "pipe", log],
    }) as unknown as ChildProcessWithoutNullStreams;
    this.launcher = launcher;
    // the worker may exit without down(): the launcher then sees its stdin close and stops the nodes
    launcher.unref();
    launcher.stdin.on("error", () => undefined); // a launcher that already stopped: its exit says why
    createInterface({ input: launcher.stdout }).on("line", (line) => {
      const answer = JSON.parse(line) as Answer;
      this.waiting.shift()?.(answer);
    });
    launcher.on("exit", (code) => {
      for (const reply of this.waiting.splice(0)) {
        reply({ error: `the evdb launcher exited (${code}): see ${join(this.folder, "launcher.err")}` });
      }
    });
    const ready = await this.reply();
    this.ports = ready.ports ?? [];
    if (!this.insecure) {
      const paths = this.certPath;
      const user = (files: { certPath: string; certKeyPath: string }): Certificate => ({
        userCertFile: readFileSync(files.certPath),
        userKeyFile: readFileSync(files.certKeyPath),
      });
      this.certificates = {
        root: readFileSync(paths.root),
        users: { admin: user(paths.admin), invalid: user(paths.invalid) },
      };
    }
  };

  public down = async (): Promise<void> => {
    const launcher = this.launcher;
    this.launcher = undefined;
    if (!launcher || launcher.exitCode !== null) return;
    const stopped = new Promise<void>((resolve) => launcher.once("exit", () => resolve()));
    launcher.stdin.end(`${JSON.stringify({ down: true })}\n`);
    await stopped;
  };

  public enableNodeLogs = async (node: EndPoint = this.endpoints[0]): Promise<void> => {
    const i = this.index(node);
    console.log(`evdb node${i}'s output: ${join(this.folder, `node${i}.out`)}`);
  };

  public killNode = async (node: EndPoint): Promise<void> => {
    this.index(node);
    await this.request({ kill: node.port });
  };

  public resurrect = async (): Promise<void> => {
    await this.request({ resurrect: true });
  };

  public inspect = () => this.openInBrowser(false);

  public openInBrowser = async (_launch = true): Promise<void> => {
    console.log(`ui available at: http${this.insecure ? "" : "s"}://${this.uri}`);
  };

  private index(node: EndPoint): number {
    const i = this.ports.indexOf(node.port);
    if (i === -1) throw new Error(`unknown node ${node.address}:${node.port}`);
    return i;
  }

  private reply(): Promise<Answer> {
    return new Promise<Answer>((resolve, reject) => {
      this.waiting.push((answer) =>
        answer.error ? reject(new Error(`evdb launcher: ${answer.error}`)) : resolve(answer)
      );
    });
  }

  private request(message: Record<string, unknown>): Promise<Answer> {
    const answer = this.reply();
    this.launcher?.stdin.write(`${JSON.stringify(message)}\n`);
    return answer;
  }
}
