// A clang plugin that fails the build on the coroutine code g++ 12.2
// miscompiles (docs/architecture.md, "g++ 12 and coroutines"):
//
//   1. inside a co_await's operand, a temporary that g++ destroys twice or
//      never makes whole: one made by a conditional operator
//      (`co_await f(c ? fs::path() : dir)`: the double free of issue 41), a
//      lambda with captures (its closure) by copy of an object with a destructor, a braced list (an aggregate
//      `T{a}`, an initializer list `{a, b}`, a list-initialized `T{a, b}`);
//   2. a co_await inside a braced initializer (`T{co_await a, co_await b}`).
//
// Plain temporaries (`co_await f(std::string("x"))`, `co_await f(a + b)`,
// one bound to a const reference) and copies or moves of named objects are
// allowed: a probe of each pattern under g++ 12.2 with AddressSanitizer found
// them sound (docs/architecture.md has the table).
//
// It runs inside clang (the sanitizer tier's compiler): -fplugin=<this .so>
// adds it after the main action, at no cost but a walk of the AST. Code in
// system headers is not checked.
#include "clang/AST/ASTConsumer.h"
#include "clang/AST/ASTContext.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "clang/AST/StmtCXX.h"
#include "clang/Basic/Diagnostic.h"
#include "clang/Basic/SourceManager.h"
#include "clang/Frontend/CompilerInstance.h"
#include "clang/Frontend/FrontendPluginRegistry.h"

#include <memory>
#include <set>
#include <string>

using namespace clang;

namespace {

// Peels what the compiler wraps around an expression without making a new
// object of the user's: casts, parentheses, the awaited object's own
// materialisation, and elided or temporary-to-parameter moves.
const Expr* peel(const Expr* e) {
  for (;;) {
    if (!e) return e;
    const Expr* next = e->IgnoreParenImpCasts();
    if (auto* m = dyn_cast<MaterializeTemporaryExpr>(next)) next = m->getSubExpr();
    if (auto* b = dyn_cast<CXXBindTemporaryExpr>(next)) next = b->getSubExpr();
    if (auto* w = dyn_cast<ExprWithCleanups>(next)) next = w->getSubExpr();
    if (auto* c = dyn_cast<ConstantExpr>(next)) next = c->getSubExpr();
    if (auto* k = dyn_cast<CXXConstructExpr>(next);
        k && k->getNumArgs() == 1 && k->getConstructor()->isCopyOrMoveConstructor()) {
      const Expr* arg = k->getArg(0)->IgnoreParenImpCasts();
      if (isa<MaterializeTemporaryExpr>(arg) || isa<CXXBindTemporaryExpr>(arg)) next = arg;
    }
    if (next == e) return e;
    e = next;
  }
}

// The expression the user wrote after co_await: asio's promise passes it
// through await_transform, which the AST shows as a call around it.
const Expr* awaited(const CoroutineSuspendExpr* s) {
  const Expr* e = peel(s->getCommonExpr());
  if (auto* call = dyn_cast_or_null<CXXMemberCallExpr>(e))
    if (auto* m = call->getMethodDecl();
        m && m->getDeclName().isIdentifier() && m->getName() == "await_transform" && call->getNumArgs() == 1)
      e = peel(call->getArg(0));
  return e;
}

bool has_destructor(QualType t) {
  const auto* rd = t->getAsCXXRecordDecl();
  return rd && rd->hasDefinition() && !rd->hasTrivialDestructor();
}

class visitor : public RecursiveASTVisitor<visitor> {
 public:
  visitor(ASTContext& ctx, DiagnosticsEngine& diags) : ctx_(ctx), diags_(diags) {
    temporary_ = diags.getCustomDiagID(
        DiagnosticsEngine::Error,
        "%0 inside a co_await's operand: g++ 12 miscompiles it; make it a named local first "
        "(docs/architecture.md, \"g++ 12 and coroutines\")");
    braced_await_ = diags.getCustomDiagID(DiagnosticsEngine::Error,
                                          "a co_await inside a braced initializer: g++ 12 miscompiles it; "
                                          "await into named locals first (docs/architecture.md)");
  }

  bool shouldVisitTemplateInstantiations() const { return true; }
  bool shouldVisitLambdaBodies() const { return true; }

  bool VisitCoawaitExpr(CoawaitExpr* e) {
    if (!e->isImplicit()) check_operand(e);
    return true;
  }
  bool VisitCoyieldExpr(CoyieldExpr* e) {
    check_operand(e);
    return true;
  }

  bool VisitInitListExpr(InitListExpr* e) {
    if (!e->isSyntacticForm()) return true;  // (each list is seen twice; once is enough)
    for (const Stmt* init : e->inits())
      if (init && awaits(init)) {
        report(e->getBeginLoc(), braced_await_);
        break;
      }
    return true;
  }
  bool VisitCXXConstructExpr(CXXConstructExpr* e) {
    if (!e->isListInitialization()) return true;
    for (const Expr* arg : e->arguments())
      if (awaits(arg)) {
        report(e->getBeginLoc(), braced_await_);
        break;
      }
    return true;
  }

 private:
  ASTContext& ctx_;
  DiagnosticsEngine& diags_;
  unsigned temporary_ = 0, braced_await_ = 0;
  std::set<std::uint64_t> reported_;  // a template's instantiations report its line once

  bool ours(SourceLocation loc) const {
    auto& sm = ctx_.getSourceManager();
    loc = sm.getExpansionLoc(loc);
    return loc.isValid() && !sm.isInSystemHeader(loc);
  }

  void report(SourceLocation loc, unsigned id, const std::string& what = {}) {
    if (!ours(loc)) return;
    auto key = ctx_.getSourceManager().getExpansionLoc(loc).getRawEncoding();
    if (!reported_.insert(key * 2 + (id == temporary_ ? 0 : 1)).second) return;
    auto d = diags_.Report(loc, id);
    if (!what.empty()) d << what;
  }

  // A co_await anywhere under `s`, not counting lambdas' bodies.
  static bool awaits(const Stmt* s) {
    if (!s) return false;
    if (isa<CoawaitExpr>(s) || isa<CoyieldExpr>(s) || isa<DependentCoawaitExpr>(s)) return true;
    if (isa<LambdaExpr>(s)) return false;
    for (const Stmt* child : s->children())
      if (awaits(child)) return true;
    return false;
  }

  void check_operand(const CoroutineSuspendExpr* s) {
    const Expr* top = awaited(s);
    if (!top) return;
    for (const Stmt* child : top->children()) scan(child);
  }

  // A temporary with a destructor anywhere under `s` (a conditional's arm).
  static bool makes_temporary(const Stmt* s) {
    if (!s || isa<LambdaExpr>(s) || isa<CoawaitExpr>(s)) return false;
    if (isa<CXXBindTemporaryExpr>(s)) return true;
    if (auto* m = dyn_cast<MaterializeTemporaryExpr>(s); m && has_destructor(m->getType())) return true;
    for (const Stmt* child : s->children())
      if (makes_temporary(child)) return true;
    return false;
  }

  // Reports what g++ 12 gets wrong under an operand's part.
  void scan(const Stmt* s) {
    if (!s) return;
    if (isa<CoawaitExpr>(s) || isa<CoyieldExpr>(s)) return;  // checked on its own
    if (auto* lambda = dyn_cast<LambdaExpr>(s)) {
      // (captures by reference, or of trivial types, leave nothing to destroy: sound)
      if (has_destructor(lambda->getType()))
        report(lambda->getBeginLoc(), temporary_, "a lambda capturing an object with a destructor");
      return;  // its body is its own
    }
    if (isa<InitListExpr>(s) || isa<CXXStdInitializerListExpr>(s)) {
      report(s->getBeginLoc(), temporary_, "a braced list");
      return;
    }
    if (auto* k = dyn_cast<CXXConstructExpr>(s); k && k->isListInitialization()) {
      report(k->getBeginLoc(), temporary_, "a braced list");
      return;
    }
    if (auto* c = dyn_cast<AbstractConditionalOperator>(s)) {
      if (makes_temporary(c->getTrueExpr()) || makes_temporary(c->getFalseExpr()) ||
          (c->isPRValue() && has_destructor(c->getType()))) {
        report(c->getBeginLoc(), temporary_, "a temporary made by a conditional operator");
        return;
      }
    }
    for (const Stmt* child : s->children()) scan(child);
  }
};

class consumer : public ASTConsumer {
 public:
  explicit consumer(CompilerInstance& ci) : ci_(ci) {}
  void HandleTranslationUnit(ASTContext& ctx) override {
    visitor v(ctx, ci_.getDiagnostics());
    v.TraverseDecl(ctx.getTranslationUnitDecl());
  }

 private:
  CompilerInstance& ci_;
};

class action : public PluginASTAction {
 protected:
  std::unique_ptr<ASTConsumer> CreateASTConsumer(CompilerInstance& ci, llvm::StringRef) override {
    return std::make_unique<consumer>(ci);
  }
  bool ParseArgs(const CompilerInstance&, const std::vector<std::string>&) override { return true; }
  ActionType getActionType() override { return AddAfterMainAction; }
};

}  // namespace

static FrontendPluginRegistry::Add<action> registered("tjob-coawait-check",
                                                      "refuses the coroutine code g++ 12 miscompiles");
