#include "app/cli.h"

#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/subcommands.h"
#include "comm/rank_protocol.h"
#include "core/display_text.h"
#include "core/errors.h"
#include "runtime/worker.h"

namespace bitparity {
namespace {

std::string JoinArgs(int argc, char** argv) {
  std::string out;
  for (int i = 0; i < argc; ++i) out += (i ? " " : "") + std::string(argv[i]);
  return out;
}

// Parses argv into `app`; the exit code when parsing ended the command (help printed: 0, a bad
// command line: 2), nullopt when the chosen command should run.
std::optional<int> Parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitBadInput;
  }
  return std::nullopt;
}

// `bitparity worker ...`: one rank process (comm/rank_protocol.h spells its flags).
int RunWorkerCommand(int argc, char** argv) {
  CLI::App app{"bitparity rank process: trains one arm on this rank and writes its trace part"};
  WorkerRequest request;
  app.add_option(kWorkerFlagRecipe, request.recipe_path, "Recipe file")->required();
  app.add_option(kWorkerFlagArm, request.arm, "Arm of the recipe to train")->required();
  app.add_option(kWorkerFlagOutDir, request.out_dir, "Directory for rank_<r>.h5")->required();
  app.add_option(kWorkerFlagDumpAt, request.dump_at,
                 "Also store full main grads at these iterations")
      ->delimiter(',');
  app.add_option(kWorkerFlagStopAfter, request.stop_after,
                 "Stop after this iteration (0: run them all)");
  app.add_flag(kWorkerFlagMemoryTimeline, request.memory_timeline,
               "Record live bytes at every phase mark");
  app.add_flag(kWorkerFlagCheckSwitches, request.check_switches_only,
               "Only check the developer switches against this rank's model; train nothing");
  app.add_flag(kWorkerFlagProbes, request.probes,
               "Record node probes whatever the recipe's [trace] probes says");
  app.add_option(kWorkerFlagThreads, request.threads,
                 "Intra-op threads instead of the recipe's [parallel] threads (0: the recipe's)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag(kWorkerFlagDeterministicAlgorithms, request.deterministic_algorithms,
               "Force deterministic algorithms whatever else turns them off");
  app.add_option(kWorkerFlagCheckpointAt, request.checkpoint_at,
                 "Save this rank's checkpoint after these iterations (needs --checkpoint-dir)")
      ->delimiter(',');
  app.add_option(kWorkerFlagCheckpointDir, request.checkpoint_dir,
                 "Folder for the checkpoints: iteration_<K>/rank_<r>.h5");
  app.add_option(kWorkerFlagResumeFrom, request.resume_from,
                 "Start from this checkpoint folder (iteration_<K>, rank_<r>.h5 per rank)");
  app.add_option(kWorkerFlagRecipeDigest, request.recipe_digest,
                 "Digest of the recipe text the launcher read (the rank refuses another)");
  if (std::optional<int> exit_code = Parse(app, argc, argv)) return *exit_code;
  return RunMappingErrors([&] { return RunWorker(request); }, std::cerr, kRankExitFailed);
}

}  // namespace

int RunCli(int argc, char** argv) {
  // Rank processes are started as `bitparity worker ...` by the launcher (or by srun/torchrun).
  if (argc > 1 && std::string(argv[1]) == kWorkerCommand) {
    return RunWorkerCommand(argc - 1, argv + 1);
  }
  CLI::App app{
      "bitparity: a deterministic test-and-benchmark harness for MoE training optimizations.\n"
      "It trains arms (engines) of a recipe on real rank processes, requires them to agree bit\n"
      "for bit, and reports what differs."};
  app.footer(kExitCodesHelp);
  app.require_subcommand(1);
  const std::vector<std::unique_ptr<Subcommand>> commands = MakeSubcommands();
  std::vector<CLI::App*> declared;
  for (const std::unique_ptr<Subcommand>& command : commands) {
    declared.push_back(command->Declare(app));
  }

  // A first word that is no subcommand and no option: name it (CLI11 would only say that a
  // subcommand is required).
  if (argc > 1 && argv[1][0] != '-') {
    std::string known;
    bool found = false;
    for (const CLI::App* sub : declared) {
      found |= sub->get_name() == argv[1];
      known += (known.empty() ? "" : ", ") + sub->get_name();
    }
    if (!found) {
      std::cerr << "error: unknown command '" << EscapedText(argv[1], false)
                << "' (commands: " << known << "; see bitparity --help)" << std::endl;
      return kExitBadInput;
    }
  }
  if (std::optional<int> exit_code = Parse(app, argc, argv)) return *exit_code;

  const std::string command_line = JoinArgs(argc, argv);
  return RunMappingErrors(
      [&] {
        for (size_t i = 0; i < commands.size(); ++i) {
          if (*declared[i]) return commands[i]->Execute(command_line);
        }
        return static_cast<int>(kExitBadInput);
      },
      std::cerr);
}

}  // namespace bitparity
