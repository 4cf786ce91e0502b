// evdb's stand-in for the Node.js client suite's jest globalSetup (which checks for Docker and pulls
// KurrentDB's images): the nodes are evdb's, started by tests/clients/nodejs_suite/launcher.py.
import { existsSync } from "fs";

module.exports = async () => {
  for (const name of ["EVDB_PYTHON", "EVDB_LAUNCHER", "EVDB_INSTANCES"]) {
    const value = process.env[name];
    if (!value || !existsSync(value)) {
      console.error(`${name} (${value ?? "unset"}) does not name an existing file or folder: run the suite with tests/clients/run_nodejs_suite.py`);
      process.exit(1);
    }
  }
};
