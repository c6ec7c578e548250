// Validates Kubernetes objects (a JSON array in argv[2]) against the API schemas of the npm
// package kubernetes-models (core and built-in groups) and @kubernetes-models/prometheus-operator
// (PrometheusRule, ServiceMonitor, PodMonitor), both installed by scripts/setup under
// $KVGATE_NPM_DIR. Prints one line per object; exits 1 when any is invalid, 2 when an object's
// kind has no schema here.
import { readFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const root = join(process.env.KVGATE_NPM_DIR || "/var/cache/kvgate/npm", "node_modules");
const objects = JSON.parse(readFileSync(process.argv[2], "utf8"));
let failed = 0;
for (const o of objects) {
  const [group, version] = o.apiVersion.includes("/") ? o.apiVersion.split("/") : ["", o.apiVersion];
  const pkg = group === "monitoring.coreos.com" ? "@kubernetes-models/prometheus-operator"
                                                : "kubernetes-models";
  const file = join(root, pkg, group ? `${group}/${version}` : version, `${o.kind}.js`);
  const name = `${o.kind}/${o.metadata?.name} (${o.apiVersion})`;
  if (!existsSync(file)) {
    console.log(`NO SCHEMA ${name}: ${file}`);
    failed = Math.max(failed, 2);
    continue;
  }
  const mod = await import(pathToFileURL(file).href);
  try {
    new mod[o.kind](o).validate();
    console.log(`ok ${name}`);
  } catch (e) {
    console.log(`INVALID ${name}: ${e.message}`);
    failed = Math.max(failed, 1);
  }
}
process.exit(failed);
