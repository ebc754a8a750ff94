; What JavaScript and TypeScript (and their JSX forms) share; each adds its own file after this one.

; Definitions
(function_declaration
  name: (identifier) @name.definition.function) @definition.function

(generator_function_declaration
  name: (identifier) @name.definition.function) @definition.function

(method_definition
  name: [(property_identifier) (private_property_identifier)] @name.definition.method) @definition.method

(variable_declarator
  name: (identifier) @name.definition.function
  value: [(arrow_function) (function_expression) (generator_function)]) @definition.function

(program
  (lexical_declaration
    (variable_declarator
      name: (identifier) @name.definition.constant) @definition.constant))

(program
  (export_statement
    declaration: (lexical_declaration
      (variable_declarator
        name: (identifier) @name.definition.constant) @definition.constant)))

; References
(call_expression
  function: (identifier) @name.reference.call)

(call_expression
  function: (member_expression
    property: [(property_identifier) (private_property_identifier)] @name.reference.call))

(new_expression
  constructor: (identifier) @name.reference.class)

(new_expression
  constructor: (member_expression
    property: (property_identifier) @name.reference.class))

(import_specifier
  name: (identifier) @name.reference.import)

(import_clause
  (identifier) @name.reference.import)
