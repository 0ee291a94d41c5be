// TLS, mutual TLS and bearer tokens: the right client gets in, the wrong one
// does not. Certificates are generated with the openssl CLI at test time.
#include <gtest/gtest.h>

#include <fstream>

#include "absl/strings/match.h"
#include "planner_process.h"

namespace pipeplan::testing {
namespace {

class Certs {
 public:
  Certs() {
    const std::string d = dir_.path();
    ok_ = Ca("ca") && Ca("otherca") && Leaf("server", "ca", true) && Leaf("client", "ca", false) &&
          Leaf("rogue", "otherca", false);
  }
  bool ok() const { return ok_; }
  std::string path(const std::string& name) const { return dir_.path() + "/" + name; }

 private:
  bool Run(const std::vector<std::string>& argv) {
    std::string out;
    const int rc = RunCommand(argv, &out);
    if (rc != 0) ADD_FAILURE() << "openssl failed: " << out;
    return rc == 0;
  }
  bool Ca(const std::string& name) {
    return Run({"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                path(name + ".key"), "-out", path(name + ".crt"), "-days", "2", "-subj",
                "/CN=pipeplan test " + name});
  }
  bool Leaf(const std::string& name, const std::string& ca, bool server) {
    std::ofstream(path(name + ".ext"))
        << (server ? "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
                   : "extendedKeyUsage=clientAuth\n");
    return Run({"/usr/bin/openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout",
                path(name + ".key"), "-out", path(name + ".csr"), "-subj",
                server ? "/CN=localhost" : "/CN=" + name}) &&
           Run({"/usr/bin/openssl", "x509", "-req", "-in", path(name + ".csr"), "-CA",
                path(ca + ".crt"), "-CAkey", path(ca + ".key"), "-CAcreateserial", "-out",
                path(name + ".crt"), "-days", "2", "-extfile", path(name + ".ext")});
  }
  TempDir dir_;
  bool ok_ = false;
};

client::ClientOptions Opts() {
  client::ClientOptions o;
  o.timeout = absl::Seconds(10);
  return o;
}

// TLS client options trusting `ca` (a file of `certs`), presenting the
// certificate `leaf`.crt/.key when `leaf` is given.
client::ClientOptions TlsOpts(const Certs& certs, const std::string& ca,
                              const std::string& leaf = "") {
  client::ClientOptions o = Opts();
  o.tls_ca_file = certs.path(ca);
  if (!leaf.empty()) {
    o.tls_cert_file = certs.path(leaf + ".crt");
    o.tls_key_file = certs.path(leaf + ".key");
  }
  return o;
}

// What ListJobs answers a client with `options` (creating the client must work).
absl::Status ListJobsAs(const PlannerProcess& planner, const client::ClientOptions& options) {
  auto c = planner.Client(options);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? (*c)->ListJobs().status() : c.status();
}

TEST(Security, TlsAcceptsTrustingClientsOnly) {
  Certs certs;
  ASSERT_TRUE(certs.ok());
  auto planner = PlannerProcess::Start(
      {"--tls-cert", certs.path("server.crt"), "--tls-key", certs.path("server.key")});
  ASSERT_TRUE(planner.ok()) << planner.status();

  EXPECT_TRUE(ListJobsAs(**planner, TlsOpts(certs, "ca.crt")).ok());
  EXPECT_EQ(ListJobsAs(**planner, Opts()).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ListJobsAs(**planner, TlsOpts(certs, "otherca.crt")).code(),
            absl::StatusCode::kUnavailable);
}

TEST(Security, MutualTlsRequiresAClientCertificateFromTheCa) {
  Certs certs;
  ASSERT_TRUE(certs.ok());
  auto planner =
      PlannerProcess::Start({"--tls-cert", certs.path("server.crt"), "--tls-key",
                             certs.path("server.key"), "--tls-client-ca", certs.path("ca.crt")});
  ASSERT_TRUE(planner.ok()) << planner.status();

  const absl::Status good = ListJobsAs(**planner, TlsOpts(certs, "ca.crt", "client"));
  EXPECT_TRUE(good.ok()) << good;
  EXPECT_EQ(ListJobsAs(**planner, TlsOpts(certs, "ca.crt")).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ListJobsAs(**planner, TlsOpts(certs, "ca.crt", "rogue")).code(),
            absl::StatusCode::kUnavailable);
}

TEST(Security, BearerTokenOnEveryRpcButHealth) {
  TempDir dir;
  const std::string token_file = dir.path() + "/token";
  std::ofstream(token_file) << "s3cret-token\n";
  const std::string wrong_file = dir.path() + "/wrong";
  std::ofstream(wrong_file) << "not-the-token\n";
  auto planner = PlannerProcess::Start({"--auth-token-file", token_file});
  ASSERT_TRUE(planner.ok()) << planner.status();

  client::ClientOptions good = Opts();
  good.token_file = token_file;
  auto c = (*planner)->Client(good);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE((*c)->ListJobs().ok());
  EXPECT_TRUE((*c)->Plan(SmallRequest()).ok());

  auto none = (*planner)->Client(Opts());
  ASSERT_TRUE(none.ok());
  auto s = (*none)->ListJobs().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(absl::StrContains(s.message(), "Bearer")) << s;
  EXPECT_EQ((*none)->Plan(SmallRequest()).status().code(), absl::StatusCode::kUnauthenticated);
  v1::WatchPlanRequest wr;
  wr.set_job_id("x");
  auto watch = (*none)->WatchPlan(wr);
  v1::PlanUpdate u;
  EXPECT_FALSE(watch->Next(&u));
  EXPECT_EQ(watch->Finish().code(), absl::StatusCode::kUnauthenticated);
  // Health needs no token.
  auto health = (*none)->CheckHealth();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_TRUE(*health);

  client::ClientOptions wrong = Opts();
  wrong.token_file = wrong_file;
  EXPECT_EQ(ListJobsAs(**planner, wrong).code(), absl::StatusCode::kUnauthenticated);
}

}  // namespace
}  // namespace pipeplan::testing
