package dev.corelog.it;

import java.util.ArrayList;
import java.util.List;
import java.util.stream.Collectors;
import org.junit.jupiter.api.function.Executable;

/**
 * Soft assertions for a scenario whose later steps do not depend on an earlier check: every
 * failed check is collected, and {@link #assertAll} reports them together, so one broker
 * gap does not hide the next.
 */
final class Soft {
    private final List<Throwable> failures = new ArrayList<>();

    void check(String what, Executable check) {
        try {
            check.execute();
        } catch (Throwable t) {
            failures.add(new AssertionError(what + ": " + t, t));
        }
    }

    void assertAll(String scenario) {
        if (failures.isEmpty()) {
            return;
        }
        AssertionError e = new AssertionError(scenario + ": " + failures.size() + " failed check(s):\n  "
                + failures.stream().map(Throwable::getMessage).collect(Collectors.joining("\n  ")));
        failures.forEach(e::addSuppressed);
        throw e;
    }
}
